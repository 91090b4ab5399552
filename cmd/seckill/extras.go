package main

import (
	"log/slog"

	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/web"
)

// extras are the parts beyond the API: the web page and the lab's runs,
// which aim the load harness at this very process unless LAB_TARGET names
// another address (a load balancer over several instances).
func extras(cfg app.Config, log *slog.Logger) app.Extras {
	return app.Extras{Web: web.FS(), Runs: lab.New(lab.Options{Target: cfg.LabTarget, Log: log})}
}
