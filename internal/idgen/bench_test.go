package idgen_test

import (
	"crypto/rand"
	"os"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
)

// BenchmarkNextString compares the generators through Generator, each
// alone (serial) and from 8 goroutines per core at once (parallel). Redis
// runs against a real server (see realRedis), and is skipped without one;
// Segments reserves its blocks in MySQL where MYSQL_DSN names one, else in
// SQLite.
// Over a long run Snowflake cannot beat 244 ns/op, serial or parallel: 4096
// IDs a millisecond is its ceiling, and a result near it measures the cap,
// not the cost of Next.
func BenchmarkNextString(b *testing.B) {
	generators := []struct {
		name string
		open func(b *testing.B) idgen.Generator
	}{
		{"redis", func(b *testing.B) idgen.Generator {
			rdb := newClient(b, realRedis(b))
			prefix := "idgen-bench-" + rand.Text()
			deleteDayKeys(b, rdb, prefix, time.Now())
			return idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks))
		}},
		{"segments", func(b *testing.B) idgen.Generator {
			dialect := sqlite.Open(testkit.MemorySQLite(b))
			if os.Getenv("MYSQL_DSN") != "" {
				dialect = mysql.Open(testkit.NewMySQL(b))
			}
			g := idgen.NewSegments(sqlBlocks(b, dialect), "idgen-bench")
			b.Cleanup(g.Close)
			return g
		}},
		{"snowflake", func(b *testing.B) idgen.Generator {
			g, err := idgen.NewSnowflake(1)
			if err != nil {
				b.Fatal(err)
			}
			return g
		}},
		{"uuidv7", func(*testing.B) idgen.Generator { return idgen.UUIDv7{} }},
	}
	for _, gen := range generators {
		b.Run(gen.name+"/serial", func(b *testing.B) {
			g := gen.open(b)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.NextString(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(gen.name+"/parallel", func(b *testing.B) {
			g := gen.open(b)
			ctx := b.Context()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := g.NextString(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
