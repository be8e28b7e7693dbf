//go:build race

package main

// raceEnabled: the race detector slows clients and servers several times,
// so the load tests shrink their runs under it.
const raceEnabled = true
