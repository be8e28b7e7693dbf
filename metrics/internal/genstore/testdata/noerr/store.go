package parley

import "context"

type Store interface {
	Count(ctx context.Context) int
}
