package main

import (
	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/web"
)

// extras are the parts beyond the API: the web page and the lab's runs,
// which aim the load harness at this very process.
func extras() app.Extras {
	return app.Extras{Web: web.FS(), Runs: lab.New(lab.Options{})}
}
