package harness

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// A Curve is req/s and p99 against one dimension of the runs (shards,
// instances or masters), a series for each kind of run that was measured
// at two values of it or more, the others held.
type Curve struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	X      string   `json:"x"`
	Series []Series `json:"series"`
}

// Series is one kind of run along a curve: the medians of its repeats at
// each value.
type Series struct {
	Label  string  `json:"label"`
	Points []Point `json:"points"`
}

// Point is a value of the dimension and the runs' medians there.
type Point struct {
	X     int     `json:"x"`
	RPS   float64 `json:"rps"`
	P99MS float64 `json:"p99_ms"`
	Runs  int     `json:"runs"`
}

// curveDims are the dimensions a report draws curves against, with how
// to read each from a row and the label of a row without it.
var curveDims = []struct {
	id, title string
	of        func(Row) int
	without   func(Row) string
}{
	{"shards", "shards", func(r Row) int { return r.Shards }, func(r Row) string { r.Shards = 0; return r.Label() }},
	{"instances", "service instances", func(r Row) int { return r.Instances }, func(r Row) string { r.Instances = 1; return r.Label() }},
	{"masters", "Redis masters", func(r Row) int { return r.Masters }, func(r Row) string { r.Masters = 0; return r.Label() }},
}

// Curves are the report's curves: for each dimension, the kinds of run
// (the row's label without that dimension, and its other dimensions held)
// measured at two values of it or more. Skipped rows and rows with no
// value of the dimension are left out.
func (rep Report) Curves() []Curve {
	var curves []Curve
	for _, d := range curveDims {
		type key struct {
			label string
			held  string // the other dimensions' values
		}
		points := make(map[key]map[int][]Row)
		var order []key
		for _, r := range rep.Rows {
			if r.Verdict == Skipped || r.RPS == 0 || d.of(r) == 0 {
				continue
			}
			var held []string
			for _, o := range curveDims {
				if o.id != d.id {
					held = append(held, strconv.Itoa(o.of(r)))
				}
			}
			k := key{d.without(r), strings.Join(held, ",")}
			if points[k] == nil {
				points[k] = make(map[int][]Row)
				order = append(order, k)
			}
			points[k][d.of(r)] = append(points[k][d.of(r)], r)
		}
		c := Curve{ID: d.id, Title: "req/s and p99 against " + d.title, X: d.title}
		for _, k := range order {
			if len(points[k]) < 2 {
				continue
			}
			s := Series{Label: k.label}
			for x, rows := range points[k] {
				var rps, p99 []float64
				for _, r := range rows {
					rps, p99 = append(rps, r.RPS), append(p99, r.P99MS)
				}
				s.Points = append(s.Points, Point{X: x, RPS: Median(rps), P99MS: Median(p99), Runs: len(rows)})
			}
			slices.SortFunc(s.Points, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
			c.Series = append(c.Series, s)
		}
		if len(c.Series) > 0 {
			curves = append(curves, c)
		}
	}
	return curves
}
