// Package fair is the one rule by which the webhook shares what it holds among client addresses (GiveWay, Gate,
// Shares), so that no flood from one address keeps the API server's reviews out. It imports none of its users.
package fair

import (
	"iter"
	"maps"
	"slices"
)

// Shares is what each client address holds, oldest first; its zero value holds nothing. Not safe for concurrent use.
type Shares[T comparable] struct {
	byAddress map[string][]T
	total     int
}

// Add has address hold t, as its newest.
func (s *Shares[T]) Add(address string, t T) {
	if s.byAddress == nil {
		s.byAddress = map[string][]T{}
	}
	s.byAddress[address] = append(s.byAddress[address], t)
	s.total++
}

// Remove says whether address held t, which it no longer does.
func (s *Shares[T]) Remove(address string, t T) bool {
	held := s.byAddress[address]
	i := slices.Index(held, t)
	if i < 0 {
		return false
	}
	if held = slices.Delete(held, i, i+1); len(held) == 0 {
		delete(s.byAddress, address)
	} else {
		s.byAddress[address] = held
	}
	s.total--
	return true
}

// Held is what address holds, oldest first; the caller must not change it.
func (s *Shares[T]) Held(address string) []T { return s.byAddress[address] }

// All is what each address holds; the caller must not change it.
func (s *Shares[T]) All() iter.Seq2[string, []T] { return maps.All(s.byAddress) }

// Count is how many address holds.
func (s *Shares[T]) Count(address string) int { return len(s.byAddress[address]) }

// Total is how many every address holds.
func (s *Shares[T]) Total() int { return s.total }

// Heaviest is the address holding the most, the smaller among equals.
func (s *Shares[T]) Heaviest() (address string) {
	most := 0
	for a, held := range s.byAddress {
		if len(held) > most || len(held) == most && a < address {
			address, most = a, len(held)
		}
	}
	return address
}
