//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memory is a process's resident set size now and at its peak, from /proc/PID/status.
type memory struct {
	RSS, HWM int64 // bytes: VmRSS and VmHWM
}

// readMemory reads the memory of process pid.
func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	scanner := bufio.NewScanner(bytes.NewReader(b))
	for scanner.Scan() {
		line := scanner.Bytes()
		for prefix, field := range map[string]*int64{"VmRSS:": &m.RSS, "VmHWM:": &m.HWM} {
			if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
				kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
				if err != nil {
					return memory{}, fmt.Errorf("/proc/%d/status: %s: %w", pid, prefix, err)
				}
				*field = kb << 10
			}
		}
	}
	return m, scanner.Err()
}

// rssSample is one point of a memory curve.
type rssSample struct {
	At time.Time
	memory
}

// rssSampler samples a process's memory at a fixed interval until Stop.
type rssSampler struct {
	pid      int
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	mu      sync.Mutex
	samples []rssSample
	peak    int64
	err     error
}

// sampleRSS starts sampling process pid every interval. onSample, when not
// nil, is called with each sample: the curve a soak test prints.
func sampleRSS(pid int, interval time.Duration, onSample func(rssSample)) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{})}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			s.take(onSample)
			select {
			case <-s.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) take(onSample func(rssSample)) {
	m, err := readMemory(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return
	}
	sample := rssSample{At: time.Now(), memory: m}
	s.samples = append(s.samples, sample)
	s.peak = max(s.peak, m.RSS, m.HWM)
	if onSample != nil {
		onSample(sample)
	}
}

// Stop stops sampling, after one last sample.
func (s *rssSampler) Stop() {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.done.Wait()
		s.take(nil)
	})
}

// Peak is the highest resident set size seen: the kernel's VmHWM, which
// covers the moments between samples too.
func (s *rssSampler) Peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// PeakBetween is the highest resident set size sampled from start to end.
func (s *rssSampler) PeakBetween(start, end time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var peak int64
	for _, sample := range s.samples {
		if !sample.At.Before(start) && !sample.At.After(end) {
			peak = max(peak, sample.RSS)
		}
	}
	return peak
}

// Samples returns the curve so far.
func (s *rssSampler) Samples() []rssSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rssSample(nil), s.samples...)
}

// Err is the last error reading the process's memory, e.g. because it exited.
func (s *rssSampler) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func mib(bytes int64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat: 100 on Linux.
const clockTicks = 100

// readCPU reads the CPU time process pid has used, all its threads, user and system.
func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which may hold spaces, in parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime and stime
		t, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
