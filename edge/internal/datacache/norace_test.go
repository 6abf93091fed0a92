//go:build !race

package datacache

// raceEnabled: the tests run under the race detector.
const raceEnabled = false
