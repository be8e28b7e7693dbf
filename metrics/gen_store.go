//go:build ignore

// gen_store writes store_gen.go, the measured methods of Metrics.Store,
// from the parley.Store interface: go generate ./metrics.
package main

import (
	"log"
	"os"

	"github.com/parleychat/parley/metrics/internal/genstore"
)

func main() {
	src, err := genstore.Generate("..")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("store_gen.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
