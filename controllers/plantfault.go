//go:build plantfault

package controllers

// Built with -tags plantfault, the manager uses a contested grant before it is saved,
// as it did before grants were saved first: the leader-change scenario
// (internal/faults) must report the double grant this allows. Never in a release.
func init() { grantsUsedBeforeSaved = true }
