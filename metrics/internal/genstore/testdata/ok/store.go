package parley

import (
	"context"
	clock "time"
)

type Store interface {
	Inner
	Plain(ctx context.Context, a, b string, n ...int) error
	Multi(ctx context.Context) (id string, key []byte, err error)
	Close() error
}

type Inner interface {
	Counts(ctx context.Context, every clock.Duration) (map[State]int64, error)
	Page(ctx context.Context, q *Query) (Page[Item], error)
}

type (
	State       string
	Query       struct{}
	Item        struct{}
	Page[T any] struct{ Items []T }
)
