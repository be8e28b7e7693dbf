package sqlite_test

import (
	"testing"

	"github.com/parleychat/parley/storetest"
)

func BenchmarkSend(b *testing.B)                { storetest.BenchSend(b, backend{}) }
func BenchmarkSendHotConversation(b *testing.B) { storetest.BenchSendHotConversation(b, backend{}) }
func BenchmarkSync(b *testing.B)                { storetest.BenchSync(b, backend{}) }
func BenchmarkConvs(b *testing.B)               { storetest.BenchConvs(b, backend{}) }
func BenchmarkFeed(b *testing.B)                { storetest.BenchFeed(b, backend{}) }
