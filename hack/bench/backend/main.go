// Command backend is the benchmark's origin: a Go HTTP server answering every request
// with 512 bytes.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strings"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "address")
	flag.Parse()
	body := []byte(strings.Repeat("x", 511) + "\n")
	log.Fatal(http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // a body is taken whole, as an application would
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	})))
}
