package main

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryLimitEnv names the environment variable that holds the container's
// memory limit: config/manager fills it from the pod's limits.memory through
// the downward API (resourceFieldRef), in bytes.
const memoryLimitEnv = "MEMORY_LIMIT"

// memoryLimitRatio is the share of the container's memory limit that the Go
// runtime's soft limit (GOMEMLIMIT) is set to. The soft limit counts only
// the Go heap, stacks and runtime; the rest of the resident memory (the
// binary's pages, about 25 MiB measured, and the kernel's socket buffers,
// which the cgroup charges too) needs the other half, with a margin below
// the limit keeps the kernel's OOM killer away. With the soft limit the
// garbage collector runs harder as the heap nears it, instead of letting
// garbage grow to twice the live heap; the heap live under make soak's
// attacks is a few tens of MiB, well below it.
const memoryLimitRatio = 0.5

// setMemoryLimit sets the Go runtime's soft memory limit to memoryLimitRatio
// of containerLimit, a quantity such as "134217728" or "128Mi", and returns
// it in bytes. It sets nothing, and returns 0, when containerLimit is empty,
// or when GOMEMLIMIT is set: the runtime has applied that one already.
func setMemoryLimit(containerLimit string) (int64, error) {
	if containerLimit == "" || os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(containerLimit)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", memoryLimitEnv, containerLimit, err)
	}
	bytes, ok := q.AsInt64()
	if !ok || bytes <= 0 {
		return 0, fmt.Errorf("%s=%q: not a positive number of bytes", memoryLimitEnv, containerLimit)
	}
	limit := int64(math.Floor(float64(bytes) * memoryLimitRatio))
	debug.SetMemoryLimit(limit)
	return limit, nil
}
