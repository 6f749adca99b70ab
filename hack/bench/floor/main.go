//go:build linux

// Command floor is the cheapest HTTP/1.1 forwarder Go can be on this machine, for
// hack/bench-proxy.sh (FLOOR=1) to measure beside nginx and the proxy: what an event
// loop of the proxy's own could reach at best. It is not a proxy anyone should run. One
// epoll loop per CPU on its own thread, a listener per loop (SO_REUSEPORT), a pool of
// backend connections per loop, level-triggered reads (a read only when the socket is
// readable), one write each way. It does none of the proxy's work: no header
// parsing beyond finding a message's end and its Content-Length, no host lookup, no
// forwarding headers, no timeouts, no limits, no bodies on requests, no chunked
// responses, no error answers; a short write or one that would block closes the
// connection.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

type conn struct {
	fd     int
	client bool
	in     []byte
	peer   *conn      // the backend serving a client's request, or the client a backend serves
	addr   netip.Addr // a client's address
}

type loop struct {
	ep      int
	ln      int
	conns   map[int]*conn
	idle    []*conn // backend connections ready for a request
	backend unix.Sockaddr
	work    proxyWork // with -work, the proxy's work on each request and answer
}

// proxyWork is the proxy's work on a request's header and an answer (work.go,
// inplace.go).
type proxyWork interface {
	request(header []byte, peer netip.Addr) ([]byte, bool)
	response(header, body []byte) ([]byte, bool)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:19004", "address")
	backend := flag.String("backend", "127.0.0.1:19001", "backend address (host:port, IPv4)")
	withWork := flag.Bool("work", false, "do the proxy's work on each request and answer (work.go)")
	inPlace := flag.Bool("inplace", false, "with -work, do it line by line, as nginx does, without fasthttp's parser (inplace.go)")
	nhosts := flag.Int("hosts", 0, "with -work, also route t0 to tN-1.bench.example.com")
	flag.Parse()
	hosts := map[string]string{"bench.example.com": "bench"}
	for i := range *nhosts {
		hosts[fmt.Sprintf("t%d.bench.example.com", i)] = "bench"
	}
	la, err := net.ResolveTCPAddr("tcp4", *listen)
	if err != nil {
		log.Fatal(err)
	}
	ba, err := net.ResolveTCPAddr("tcp4", *backend)
	if err != nil {
		log.Fatal(err)
	}
	// One loop a P, and one P more for the runtime: with every P held by a loop blocked
	// in epoll_wait, sysmon would take one back at each tick and wake a thread for it
	// (the proxy's loop engine does the same; proxy/loop_linux.go, loopCount).
	nloops := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(nloops + 1)
	for range nloops {
		l, err := newLoop(&unix.SockaddrInet4{Port: la.Port, Addr: [4]byte(la.IP.To4())}, &unix.SockaddrInet4{Port: ba.Port, Addr: [4]byte(ba.IP.To4())})
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case *withWork && *inPlace:
			l.work = newInplace(hosts)
		case *withWork:
			l.work = newWork(hosts)
		}
		go l.run()
	}
	select {}
}

func newLoop(addr, backend unix.Sockaddr) (*loop, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	_ = unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(ln, addr); err != nil {
		return nil, err
	}
	if err := unix.Listen(ln, 1024); err != nil {
		return nil, err
	}
	ep, err := unix.EpollCreate1(0)
	if err != nil {
		return nil, err
	}
	l := &loop{ep: ep, ln: ln, conns: map[int]*conn{}, backend: backend}
	return l, l.watch(ln)
}

func (l *loop) watch(fd int) error {
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
}

func (l *loop) run() {
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(l.ep, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == l.ln {
				l.accept()
				continue
			}
			c := l.conns[fd]
			if c == nil {
				continue
			}
			m, err := unix.Read(fd, buf)
			if m <= 0 || err != nil {
				l.close(c)
				continue
			}
			c.in = append(c.in, buf[:m]...)
			if c.client {
				l.request(c)
			} else {
				l.response(c)
			}
		}
	}
}

func (l *loop) accept() {
	for {
		fd, sa, err := unix.Accept4(l.ln, unix.SOCK_NONBLOCK)
		if err != nil {
			return
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &conn{fd: fd, client: true}
		if a, ok := sa.(*unix.SockaddrInet4); ok {
			c.addr = netip.AddrFrom4(a.Addr)
		}
		l.conns[fd] = c
		if l.watch(fd) != nil {
			l.close(l.conns[fd])
		}
	}
}

func (l *loop) close(c *conn) {
	_ = unix.Close(c.fd)
	delete(l.conns, c.fd)
	if c.peer != nil {
		c.peer.peer = nil
	}
	for i, x := range l.idle {
		if x == c {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			break
		}
	}
}

var endOfHeader = []byte("\r\n\r\n")

// request forwards a client's complete request header (bodies are not read).
func (l *loop) request(c *conn) {
	if c.peer != nil {
		return // a request is in flight; the next waits in c.in
	}
	i := bytes.Index(c.in, endOfHeader)
	if i < 0 {
		return
	}
	b, err := l.backendConn()
	if err != nil {
		log.Print(err)
		l.close(c)
		return
	}
	out := c.in[:i+4]
	if l.work != nil {
		var ok bool
		if out, ok = l.work.request(out, c.addr); !ok {
			l.idle = append(l.idle, b)
			l.close(c)
			return
		}
	}
	b.peer, c.peer = c, b
	if _, err := unix.Write(b.fd, out); err != nil {
		l.close(b)
		l.close(c)
		return
	}
	c.in = c.in[:copy(c.in, c.in[i+4:])]
}

func (l *loop) backendConn() (*conn, error) {
	if n := len(l.idle); n > 0 {
		b := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return b, nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, l.backend); err != nil { // blocking: a new connection is rare
		_ = unix.Close(fd)
		return nil, err
	}
	_ = unix.SetNonblock(fd, true)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	b := &conn{fd: fd}
	l.conns[fd] = b
	return b, l.watch(fd)
}

var contentLength = []byte("\r\nContent-Length: ")

// response forwards a complete response with a Content-Length to its client.
func (l *loop) response(b *conn) {
	c := b.peer
	if c == nil {
		l.close(b) // bytes nobody asked for: as nginx does, the connection goes
		return
	}
	i := bytes.Index(b.in, endOfHeader)
	if i < 0 {
		return
	}
	size := 0
	if j := bytes.Index(b.in[:i+2], contentLength); j >= 0 {
		v := b.in[j+len(contentLength):]
		size, _ = strconv.Atoi(string(v[:bytes.IndexByte(v, '\r')]))
	}
	if len(b.in) < i+4+size {
		return
	}
	out := b.in[:i+4+size]
	if l.work != nil {
		var ok bool
		if out, ok = l.work.response(b.in[:i+4], b.in[i+4:i+4+size]); !ok {
			l.close(b)
			l.close(c)
			return
		}
	}
	_, err := unix.Write(c.fd, out)
	b.in = b.in[:0]
	b.peer, c.peer = nil, nil
	l.idle = append(l.idle, b)
	if err != nil {
		l.close(c)
		return
	}
	if len(c.in) > 0 {
		l.request(c)
	}
}
