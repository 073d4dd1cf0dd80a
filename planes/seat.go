package planes

import "context"

// Seat is a request's place among the requests its plane executes at once
// (planes/fairness). Those places share the server's CPUs among planes, so
// a request gives its place up while it waits on something that is not
// the server's CPUs: the datastore, an admission webhook (which may call
// the plane back).
type Seat interface {
	// Yield gives the place up; back takes one again (or, when ctx ends
	// first, lets the request go on without one: it is ending).
	Yield(ctx context.Context) (back func())
}

type seatKey struct{}

// WithSeat returns a copy of ctx carrying the request's seat.
func WithSeat(ctx context.Context, s Seat) context.Context {
	return context.WithValue(ctx, seatKey{}, s)
}

// YieldSeat gives up the seat of the request ctx belongs to, if it holds
// one, until back is called.
func YieldSeat(ctx context.Context) (back func()) {
	s, ok := ctx.Value(seatKey{}).(Seat)
	if !ok {
		return func() {}
	}
	return s.Yield(ctx)
}
