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
