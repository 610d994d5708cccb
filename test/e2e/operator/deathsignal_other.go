//go:build !linux

package operator

import "os/exec"

// setDeathSignal does nothing: only Linux can tie a child's life to its parent's.
func setDeathSignal(*exec.Cmd) {}
