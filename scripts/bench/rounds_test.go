package main

import (
	"reflect"
	"testing"
)

// The binaries take turns going first, and each figure is the median of
// its rounds.
func TestAlternate(t *testing.T) {
	var order []bool
	n := 0.0
	current, old, err := alternate(3, func(isOld bool) (map[string]float64, error) {
		order = append(order, isOld)
		n++
		return map[string]float64{"seconds": n}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true, false, false, true}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v (false: the current binary)", order, want)
	}
	// current measured 1, 4, 5; old 2, 3, 6.
	if want := map[string]float64{"seconds": 4, "seconds_min": 1, "seconds_max": 5}; !reflect.DeepEqual(current, want) {
		t.Errorf("current %v, want %v", current, want)
	}
	if want := map[string]float64{"seconds": 3, "seconds_min": 2, "seconds_max": 6}; !reflect.DeepEqual(old, want) {
		t.Errorf("old %v, want %v", old, want)
	}
	two, _, err := alternate(2, func(isOld bool) (map[string]float64, error) {
		n++
		return map[string]float64{"seconds": n}, nil
	})
	// current measured 7 and 10.
	if err != nil || two["seconds"] != 8.5 {
		t.Errorf("two rounds: median %v, %v; want 8.5, the mean of the middle two", two["seconds"], err)
	}
	one, _, err := alternate(1, func(bool) (map[string]float64, error) { return map[string]float64{"x": 7}, nil })
	if err != nil || !reflect.DeepEqual(one, map[string]float64{"x": 7}) {
		t.Errorf("one round: %v, %v; want the figure alone", one, err)
	}
}

// Without an older binary only the one under test is measured, every
// round; with one, its medians come prefixed old_.
func TestRoundsFigures(t *testing.T) {
	n := 0.0
	alone, err := roundsFigures(3, false, func(isOld bool) (map[string]float64, error) {
		if isOld {
			t.Error("the older binary measured without one")
		}
		n++
		return map[string]float64{"s": n}, nil
	})
	if want := map[string]float64{"s": 2, "s_min": 1, "s_max": 3}; err != nil || !reflect.DeepEqual(alone, want) {
		t.Errorf("alone: %v, %v; want %v", alone, err, want)
	}
	both, err := roundsFigures(1, true, func(isOld bool) (map[string]float64, error) {
		if isOld {
			return map[string]float64{"s": 9}, nil
		}
		return map[string]float64{"s": 5}, nil
	})
	if want := map[string]float64{"s": 5, "old_s": 9}; err != nil || !reflect.DeepEqual(both, want) {
		t.Errorf("side by side: %v, %v; want %v", both, err, want)
	}
}
