package main

import (
	"runtime/debug"
	"testing"
)

func TestSetMemoryLimit(t *testing.T) {
	previous := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(previous) })
	for _, tt := range []struct {
		name, containerLimit, gomemlimit string
		want                             int64
		wantErr                          bool
	}{
		{name: "the downward API's bytes", containerLimit: "134217728", want: 67108864},
		{name: "a quantity", containerLimit: "128Mi", want: 67108864},
		{name: "no limit", containerLimit: ""},
		{name: "GOMEMLIMIT set wins", containerLimit: "128Mi", gomemlimit: "90MiB"},
		{name: "not a quantity", containerLimit: "lots", wantErr: true},
		{name: "zero", containerLimit: "0", wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tt.gomemlimit)
			debug.SetMemoryLimit(previous)
			got, err := setMemoryLimit(tt.containerLimit)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("setMemoryLimit(%q) = %d, %v; want %d, error %t", tt.containerLimit, got, err, tt.want, tt.wantErr)
			}
			want := tt.want
			if want == 0 {
				want = previous // untouched
			}
			if set := debug.SetMemoryLimit(-1); set != want {
				t.Errorf("the runtime's memory limit is %d, want %d", set, want)
			}
		})
	}
}
