// Package server assembles the kplane process: it resolves the options,
// generates credentials on first start, starts the datastore, builds the
// multi-plane apiserver on top of it and runs everything until the context
// ends. It follows the apiserver pattern: Options -> Config -> Complete() ->
// New() -> Run(ctx), each step testable on its own.
package server
