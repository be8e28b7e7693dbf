package fault

import (
	"errors"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

func TestArmSpec(t *testing.T) {
	tests := []struct {
		spec    string
		wantErr bool
		points  int
	}{
		{"", false, 0},
		{" , ", false, 0},
		{"store.before_commit=crash", false, 1},
		{"api.after_send_commit=unavailable@1,bus.publish=drop", false, 2},
		{"store.before_insert=delay:50ms", false, 1},
		{"export.after_shard=crash@3", false, 1},
		{"gateway.sync=drop,gateway.send=dup", false, 2},
		{"nosuch.point=crash", true, 0},
		{"store.after_key_lookup=crash", true, 0}, // retired: no such place on PostgreSQL's one send path
		{"store.before_commit", true, 0},
		{"store.before_commit=explode", true, 0},
		{"store.before_commit=crash@0", true, 0},
		{"store.before_commit=crash@x", true, 0},
		{"store.before_commit=delay:-1s", true, 0},
		{"store.before_commit=crash,store.before_commit=drop", true, 0},
	}
	for _, tt := range tests {
		rules, err := parse(tt.spec)
		if (err != nil) != tt.wantErr {
			t.Errorf("parse(%q) error = %v, want error %v", tt.spec, err, tt.wantErr)
			continue
		}
		if len(rules) != tt.points {
			t.Errorf("parse(%q) = %d points, want %d", tt.spec, len(rules), tt.points)
		}
	}
}

func TestHit(t *testing.T) {
	t.Cleanup(func() { Arm("") })
	if err := Hit(StoreBeforeCommit); err != nil {
		t.Fatalf("disarmed Hit = %v, want nil", err)
	}
	if err := Arm("store.before_commit=unavailable@2,bus.publish=drop,store.before_insert=delay:20ms"); err != nil {
		t.Fatal(err)
	}
	if !Armed(StoreBeforeCommit) || Armed(GatewayPush) {
		t.Fatal("Armed does not match the spec")
	}
	if err := Hit(StoreBeforeCommit); err != nil {
		t.Fatalf("first hit of an @2 point = %v, want nil", err)
	}
	if err := Hit(StoreBeforeCommit); parley.ErrorCode(err) != parley.CodeUnavailable {
		t.Fatalf("second hit = %v, want UNAVAILABLE", err)
	}
	if err := Hit(StoreBeforeCommit); err != nil {
		t.Fatalf("third hit of an @2 point = %v, want nil", err)
	}
	if err := Hit(BusPublish); !errors.Is(err, ErrDropped) {
		t.Fatalf("drop = %v, want ErrDropped", err)
	}
	start := time.Now()
	if err := Hit(StoreBeforeInsert); err != nil {
		t.Fatalf("delay = %v, want nil", err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("delay did not sleep")
	}
	if err := Hit(GatewayPush); err != nil {
		t.Fatalf("unarmed point = %v", err)
	}
	if err := Arm("gateway.send=dup"); err != nil {
		t.Fatal(err)
	}
	if err := Hit(GatewaySend); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("dup = %v, want ErrDuplicate", err)
	}
}

// BenchmarkHitDisarmed shows what a disarmed point costs on the hot path.
func BenchmarkHitDisarmed(b *testing.B) {
	Arm("")
	for b.Loop() {
		if Hit(StoreBeforeCommit) != nil {
			b.Fatal("disarmed point fired")
		}
	}
}
