// Command hostile measures what hostile clients cost the proxy's memory: the peak
// resident memory of a running proxy process while one client sends a 300 MB chunked
// body (GET and POST), and while clients flood it with 100,000 random hosts, after
// which the one real route must still be answered from memory. Run by
// hack/bench-proxy-memory.sh.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	proxyAddr  = flag.String("proxy", "127.0.0.1:19002", "the proxy's address")
	pid        = flag.Int("pid", 0, "the proxy's process id")
	metricsURL = flag.String("metrics", "http://127.0.0.1:19005/metrics", "the proxy's metrics")
	hotHost    = flag.String("host", "bench.example.com", "the host that has a route")
	bodyMB     = flag.Int("body-mb", 300, "size of the hostile body")
	hosts      = flag.Int("hosts", 100_000, "random hosts in the flood")
)

func main() {
	flag.Parse()
	failed := false
	for _, method := range []string{"GET", "POST"} {
		start := resetPeak()
		status := hugeBody(method)
		grew := peak() - start
		fmt.Printf("%-4s with a %d MB chunked body: answered %d; peak RSS grew %.1f MiB (from %.1f MiB)\n",
			method, *bodyMB, status, mib(grew), mib(start))
		failed = failed || status != 413 || grew > 64<<20
	}
	start := resetPeak()
	before := hits()
	notFound := flood()
	resp, err := http.Get("http://" + *proxyAddr + "/") // Host is the proxy's address: a miss
	if err == nil {
		resp.Body.Close()
	}
	hot := get(*hotHost)
	// The loop engine adds its counts to the metrics at its next sweep (25 ms).
	fromMemory := hits() - before
	for wait := 0; fromMemory == 0 && wait < 20; wait++ {
		time.Sleep(50 * time.Millisecond)
		fromMemory = hits() - before
	}
	grew := peak() - start
	fmt.Printf("flood of %d random hosts: %d answered 404; peak RSS grew %.1f MiB (from %.1f MiB); "+
		"the real route then answered %d, served from memory: %v\n", *hosts, notFound, mib(grew), mib(start), hot, fromMemory == 1)
	failed = failed || hot != 200 || fromMemory != 1 || notFound != int64(*hosts)
	if failed {
		os.Exit(1)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// resetPeak sets the process's peak resident memory back to its current value and
// returns it (Linux: writing 5 to clear_refs resets VmHWM).
func resetPeak() int64 {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", *pid), []byte("5"), 0); err != nil {
		log.Fatalf("resetting the peak RSS: %v", err)
	}
	return status("VmRSS:")
}

func peak() int64 { return status("VmHWM:") }

func status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	log.Fatalf("no %s in /proc/%d/status", field, *pid)
	return 0
}

// hugeBody sends a chunked body of bodyMB and returns the status the proxy answered.
func hugeBody(method string) int {
	conn, err := net.Dial("tcp", *proxyAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	go func() {
		bw := bufio.NewWriterSize(conn, 64<<10)
		fmt.Fprintf(bw, "%s /upload HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", method, *hotHost)
		chunk := strings.Repeat("x", 32<<10)
		for sent := 0; sent < *bodyMB<<20; sent += len(chunk) {
			if _, err := fmt.Fprintf(bw, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
		fmt.Fprint(bw, "0\r\n\r\n")
		_ = bw.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		log.Fatalf("%s with a huge body: %v", method, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// flood asks for random hosts over 64 kept-alive connections; it returns how many
// were answered 404.
func flood() int64 {
	var notFound, next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", *proxyAddr)
			if err != nil {
				log.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for {
				i := next.Add(1)
				if i > int64(*hosts) {
					return
				}
				fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: r%d-%d.flood.example.com\r\n\r\n", i, time.Now().UnixNano())
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					log.Fatalf("flood: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 404 {
					notFound.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return notFound.Load()
}

func get(host string) int {
	req, _ := http.NewRequest(http.MethodGet, "http://"+*proxyAddr+"/", nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// hits reads how many requests the proxy answered 200 from its in-process cache.
func hits() int64 {
	resp, err := http.Get(*metricsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, `tenantroute_proxy_requests_total{code="200",outcome="hit"}`) {
			v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return int64(v)
		}
	}
	return 0
}
