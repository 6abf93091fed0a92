//go:build race

package postgres

// raceEnabled: allocation counts are not asserted under the race detector, which allocates on
// its own (and sync.Pool drops items at random under it).
const raceEnabled = true
