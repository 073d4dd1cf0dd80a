// Package binarypages hands the pages of the running binary that only
// start-up touched back to the kernel.
//
// Building the API server runs code and reads tables spread over most of
// the binary (package initialisation, scheme and OpenAPI registration,
// route installation), and the kernel maps the neighbours of every page
// faulted in. An empty server thus kept about 100 MiB of its 131 MiB
// binary resident, counted in its RSS and in its cgroup's memory, although
// serving touches about a third of it. Paged out once start-up is over,
// only the pages serving touches come back.
package binarypages
