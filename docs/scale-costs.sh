#!/usr/bin/env bash
# Per-purchase costs for docs/SCALE.md: Redis CPU and commands, service CPU,
# MariaDB CPU, for the lua and async modes, one Redis of its own.
set -euo pipefail
# Build first: go build -o /tmp/seckill-scale ./cmd/seckill && go build -o /tmp/lt ./loadtest
BIN=${BIN:-/tmp/seckill-scale}; LT=${LT:-/tmp/lt}
N=${N:-60000}; RP=46379; HP=48080
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --pidfile /tmp/scale-redis.pid >/dev/null
trap 'kill $(cat /tmp/scale-redis.pid) 2>/dev/null; kill $SPID 2>/dev/null; mysql -uroot -e "drop database if exists scale_m"' EXIT
mysql -uroot -e 'drop database if exists scale_m; create database scale_m'
sleep 0.5
HTTP_ADDR=127.0.0.1:$HP REDIS_ADDR=127.0.0.1:$RP MYSQL_DSN='root:@tcp(127.0.0.1:3306)/scale_m?parseTime=true' \
  RATE_LIMIT=0 ADDRESS_RATE=0 ADMIN_TOKEN=scaletoken DEMO_STOCK=0 LOG_LEVEL=warn $BIN >/tmp/scale-svc.log 2>&1 &
SPID=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:$HP/healthz >/dev/null 2>&1 && break; sleep 0.2; done
rcpu() { redis-cli -p $RP info cpu | awk -F: '/used_cpu_(sys|user):/{s+=$2} END{printf "%.3f", s}'; }
rcalls() { redis-cli -p $RP info commandstats | awk -F'[=,]' '/calls=/{s+=$2} END{print s}'; }
pcpu() { awk '{printf "%.3f", ($14+$15)/100}' /proc/$1/stat; }
MPID=$(pgrep -x mariadbd | head -1)
for mode in lua async; do
  r0=$(rcpu); c0=$(rcalls); s0=$(pcpu $SPID); m0=$(pcpu $MPID); t0=$(date +%s.%N)
  $LT -target http://127.0.0.1:$HP -admin-token scaletoken -mode $mode -lock none -requests $N -buyers $N -stock $N -concurrency 100 > /tmp/scale-$mode.txt 2>&1
  t1=$(date +%s.%N); r1=$(rcpu); c1=$(rcalls); s1=$(pcpu $SPID); m1=$(pcpu $MPID)
  grep -E 'SAFE|req/s|verdict' /tmp/scale-$mode.txt | head -3
  python3 -c "
n=$N; print('$mode: %d purchases in %.1f s; redis %.1f us/purchase, %.2f commands/purchase; service %.1f us/purchase; mariadbd %.1f us/purchase' % (n, $t1-$t0, ($r1-$r0)/n*1e6, ($c1-$c0)/n, ($s1-$s0)/n*1e6, ($m1-$m0)/n*1e6))"
done
