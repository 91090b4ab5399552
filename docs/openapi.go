// Package docs holds what of the documentation the service serves: the
// API's OpenAPI description (openapi.yaml, built by internal/api/spec).
package docs

import (
	_ "embed"
	"sync"

	"sigs.k8s.io/yaml"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPIJSON is openapi.yaml as JSON, for GET /openapi.json.
var OpenAPIJSON = sync.OnceValues(func() ([]byte, error) { return yaml.YAMLToJSON(openAPI) })

// OpenAPIYAML is openapi.yaml as it is.
func OpenAPIYAML() []byte { return openAPI }
