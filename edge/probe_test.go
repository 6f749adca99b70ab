package edge

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A health endpoint is outside the operator: its status line reaches the
// EdgeProvider's conditions, events and logs at every probe, whatever its size. The
// probe's own URL, as long as the CRD allows, still leaves the answer in view.
func TestAProbeQuotesAnAnswerOfAnySizeInAFewHundredBytes(t *testing.T) {
	path := "/" + strings.Repeat("healthz/", 240) // 1,921 bytes; the CRD allows a URL of 2,048
	for _, tc := range []struct {
		name   string
		answer string
		ok     bool
		says   string
	}{
		{"a long reason phrase", "HTTP/1.1 200 " + strings.Repeat("fine ", 8000) + "\r\nContent-Length: 0\r\n\r\n", true, " 200 fine"},
		{"megabytes of headers", "HTTP/1.1 503 Service Unavailable\r\n" +
			strings.Repeat("X-Padding: "+strings.Repeat("p", 1000)+"\r\n", 2000) + "Content-Length: 0\r\n\r\n", false, "exceeded"},
		{"a short answer", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", false, " 503 Service Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
							_, _ = c.Write([]byte(tc.answer))
						}
					}()
				}
			}()
			url := "http://" + ln.Addr().String() + path
			p := NewMonitor().probe(context.Background(), Check{URL: url, Timeout: 5 * time.Second})
			if p.OK != tc.ok || !strings.Contains(p.Message, tc.says) || !strings.Contains(p.Message, url) {
				t.Errorf("probe OK %v, message %.200q ... %.200q; want OK %v, the URL and %q",
					p.OK, p.Message, p.Message[max(0, len(p.Message)-200):], tc.ok, tc.says)
			}
			if quoted := len(p.Message) - len(url); quoted > maxProbeAnswer+16 {
				t.Errorf("the probe's message quotes %d bytes of the answer", quoted)
			}
		})
	}
}
