module github.com/flowstate-io/flowstate/entry

go 1.26.0
