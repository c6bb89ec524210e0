package flowstate

import (
	_ "antrea.io/libOpenflow/openflow15"
	_ "antrea.io/libOpenflow/util"
	_ "github.com/ovn-org/libovsdb/client"
	_ "github.com/ovn-org/libovsdb/model"
	_ "github.com/ovn-org/libovsdb/ovsdb"
	_ "go.etcd.io/bbolt"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/reflection"
	_ "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	_ "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	_ "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/spf13/cobra"
	_ "go.uber.org/goleak"
	_ "github.com/go-logr/logr"
	_ "github.com/go-logr/stdr"
)
