package main

import "fmt"

// alternate measures the binary under test and an older one rounds times
// each, in turn: the one under test first in even rounds, second in odd
// ones. On a shared 2-core machine the server measured second of a pair
// came out faster (the same build: a 1,000-plane rollout in 33.9 s second,
// 38.3-44.7 s first), so a single pair favours whichever runs second.
// Each figure is the median of its rounds; with more than one round its
// lowest and highest value are kept too (<name>_min, <name>_max).
//
// measure runs one round of one binary (old: the older one) and returns
// its figures without prefix.
func alternate(rounds int, measure func(old bool) (map[string]float64, error)) (current, old map[string]float64, err error) {
	var currentRounds, oldRounds []map[string]float64
	for round := range max(rounds, 1) {
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, isOld := range order {
			figures, err := measure(isOld)
			if err != nil {
				which := "the current"
				if isOld {
					which = "the old"
				}
				return nil, nil, fmt.Errorf("round %d of %d (%s binary): %w", round+1, rounds, which, err)
			}
			if isOld {
				oldRounds = append(oldRounds, figures)
			} else {
				currentRounds = append(currentRounds, figures)
			}
		}
	}
	return medians(currentRounds), medians(oldRounds), nil
}

// roundsFigures measures the binary under test rounds times, or, with an
// older binary (withOld), both in turn (alternate): the medians, the
// older binary's prefixed old_.
func roundsFigures(rounds int, withOld bool, measure func(old bool) (map[string]float64, error)) (map[string]float64, error) {
	figures := map[string]float64{}
	if !withOld {
		var all []map[string]float64
		for range max(rounds, 1) {
			f, err := measure(false)
			if err != nil {
				return nil, err
			}
			all = append(all, f)
		}
		addPrefixed(figures, "", medians(all))
		return figures, nil
	}
	current, old, err := alternate(rounds, measure)
	if err != nil {
		return nil, err
	}
	addPrefixed(figures, "", current)
	addPrefixed(figures, "old_", old)
	return figures, nil
}

// medians keeps each figure's median over rounds, and its extremes when
// there is more than one round.
func medians(rounds []map[string]float64) map[string]float64 {
	values := map[string][]float64{}
	for _, figures := range rounds {
		for name, v := range figures {
			values[name] = append(values[name], v)
		}
	}
	out := map[string]float64{}
	for name, vs := range values {
		out[name] = median(vs)
		if len(rounds) > 1 {
			out[name+"_min"], out[name+"_max"] = minMax(vs)
		}
	}
	return out
}

func minMax(values []float64) (lo, hi float64) {
	lo, hi = values[0], values[0]
	for _, v := range values[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// addPrefixed copies figures into into, each name prefixed.
func addPrefixed(into map[string]float64, prefix string, figures map[string]float64) {
	for name, v := range figures {
		into[prefix+name] = v
	}
}
