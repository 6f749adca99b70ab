package edge

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A health endpoint is outside the operator: its status line reaches the
// EdgeProvider's conditions, events and logs at every probe, whatever its size.
func TestAProbeQuotesAnAnswerOfAnySizeInAFewHundredBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		ok     bool
		says   string
	}{
		{"a long reason phrase", "HTTP/1.1 200 " + strings.Repeat("fine ", 8000) + "\r\nContent-Length: 0\r\n\r\n", true, "200 fine"},
		{"megabytes of headers", "HTTP/1.1 503 Service Unavailable\r\n" +
			strings.Repeat("X-Padding: "+strings.Repeat("p", 1000)+"\r\n", 2000) + "Content-Length: 0\r\n\r\n", false, "exceeded"},
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
						if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
							_, _ = c.Write([]byte(tc.answer))
						}
						time.Sleep(100 * time.Millisecond)
					}()
				}
			}()
			p := NewMonitor().probe(context.Background(), Check{URL: "http://" + ln.Addr().String() + "/healthz", Timeout: 5 * time.Second})
			if p.OK != tc.ok || !strings.Contains(p.Message, tc.says) {
				t.Errorf("probe OK %v, message %.200q; want OK %v, saying %q", p.OK, p.Message, tc.ok, tc.says)
			}
			if len(p.Message) > maxProbeMessage {
				t.Errorf("the probe's message is %d bytes", len(p.Message))
			}
		})
	}
}
