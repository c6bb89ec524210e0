module github.com/flowstate-io/flowstate/client

go 1.26.0

require (
	github.com/flowstate-io/flowstate/api v0.0.0-00010101000000-000000000000
	github.com/flowstate-io/flowstate/entry v0.0.0-00010101000000-000000000000
	github.com/flowstate-io/flowstate/errdefs v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/flowstate-io/flowstate/api => ../api

replace github.com/flowstate-io/flowstate/entry => ../entry

replace github.com/flowstate-io/flowstate/errdefs => ../errdefs
