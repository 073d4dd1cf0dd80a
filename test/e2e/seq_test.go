package e2e

import "sync/atomic"

var planeSeq atomic.Int64
