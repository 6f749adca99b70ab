// Package charts holds the tests of the Helm chart in tenantroute-operator/: it lints,
// renders with Helm's own library, applies the rendering to a real API server as a
// server-side dry run, and compares what the chart and config/ install.
package charts
