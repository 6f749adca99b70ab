// Package routes is where the control plane and the data plane meet: the route a
// hostname leads to, the rule that grants a hostname to one TenantRoute, the index of
// granted hostnames, the source of truth that reads it, and the layout of the shared
// cache. Controllers write what it decides; the proxy reads it; neither imports the
// other.
package routes

import "errors"

// Route is where a host's requests go.
type Route struct {
	Tenant   string   `json:"tenant"`
	Region   string   `json:"region"`
	Backends []string `json:"backends"`
}

// ErrNotFound is a source's answer for a host it knows has no route. From the source
// of truth it is authoritative; from a cache it is only a miss.
var ErrNotFound = errors.New("no route for this host")
