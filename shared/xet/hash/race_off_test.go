//go:build !race

package hash

const raceEnabled = false
