// Package storetest holds what benchmarks outside package store need of
// bbolt itself, which only store/** may import (depguard): the fsync floor
// that issue 35's small-write benchmarks set each figure beside.
//
// Only _test.go files import it.
package storetest
