package main

import "seckill/internal/app"

// extras are the parts beyond the API: the web page and the lab's runs.
func extras() app.Extras { return app.Extras{} }
