// Package deploy holds no code: its tests check the files operators install
// from this directory against what the docs and the binaries say. The
// DaemonSet and its RBAC decode strictly as Kubernetes objects, the Antrea
// overlay changes only the OVS run directory, every alert's runbook_url
// names a section of docs/operations.md, and the systemd units run under a
// real systemd (systemd_test.go).
package deploy
