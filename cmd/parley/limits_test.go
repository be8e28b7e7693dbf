package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/ratelimit"
)

// TestBuiltinLimitsCoverBuckets: every bucket a route uses has a built-in
// limit, and every built-in limit is a bucket a route uses, so a server
// with no rate_limits key leaves no route unlimited by oversight.
func TestBuiltinLimitsCoverBuckets(t *testing.T) {
	got := slices.Sorted(maps.Keys(config.DefaultRateLimits()))
	want := slices.Sorted(slices.Values(ratelimit.Buckets))
	if !slices.Equal(got, want) {
		t.Errorf("built-in limits for %v, buckets %v", got, want)
	}
	for b, l := range config.DefaultRateLimits() {
		if l.Limit <= 0 || l.Window <= 0 {
			t.Errorf("built-in %s: %+v, want a limit", b, l)
		}
	}
}
