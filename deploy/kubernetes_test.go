package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const daemonSetFile = "kubernetes/flowstated-daemonset.yaml"

// objects is what the manifest holds, decoded strictly: a field Kubernetes
// does not know (a typo, a wrong indent) fails the decode.
type objects struct {
	ds       *appsv1.DaemonSet
	sa       *corev1.ServiceAccount
	svc      *corev1.Service
	roles    map[string]*rbacv1.ClusterRole
	bindings map[string]*rbacv1.ClusterRoleBinding
}

func decodeManifest(t *testing.T, text []byte) objects {
	t.Helper()
	o := objects{roles: map[string]*rbacv1.ClusterRole{}, bindings: map[string]*rbacv1.ClusterRoleBinding{}}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(text), -1) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch head.Kind {
		case "":
			continue // comments only
		case "DaemonSet":
			o.ds = &appsv1.DaemonSet{}
			obj = o.ds
		case "ServiceAccount":
			o.sa = &corev1.ServiceAccount{}
			obj = o.sa
		case "Service":
			o.svc = &corev1.Service{}
			obj = o.svc
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			obj = r
			defer func() { o.roles[r.Name] = r }()
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			obj = b
			defer func() { o.bindings[b.Name] = b }()
		default:
			t.Fatalf("document %d: kind %q is not checked by this test: add it", i, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("document %d (%s): strict decode: %v", i, head.Kind, err)
		}
	}
	if o.ds == nil || o.sa == nil || o.svc == nil {
		t.Fatalf("the manifest lacks the DaemonSet, its ServiceAccount or the metrics Service")
	}
	return o
}

func readManifest(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(daemonSetFile)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func container(t *testing.T, ds *appsv1.DaemonSet, name string) *corev1.Container {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// flagValue is the value of --name=V among args ("" when absent).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestDaemonSet checks the manifest decodes strictly and holds what
// docs/operations.md (Kubernetes) promises of it.
func TestDaemonSet(t *testing.T) {
	o := decodeManifest(t, readManifest(t))
	ds := o.ds
	pod := ds.Spec.Template

	if got := pod.Annotations["kubectl.kubernetes.io/default-container"]; got != "flowstated" {
		t.Errorf("default-container annotation %q, want flowstated", got)
	}
	fs, guard, proxy := container(t, ds, "flowstated"), container(t, ds, "guard"), container(t, ds, "kube-rbac-proxy")

	// The OVS run directory is one hostPath, mounted at the same place in
	// both containers that dial OVS, which is where their flags look.
	var ovsRun *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == "ovs-run" {
			ovsRun = &pod.Spec.Volumes[i]
		}
	}
	if ovsRun == nil || ovsRun.HostPath == nil {
		t.Fatal("no ovs-run hostPath volume")
	}
	for _, c := range []*corev1.Container{fs, guard} {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ovs-run" })
		if i < 0 || c.VolumeMounts[i].MountPath != "/var/run/openvswitch" {
			t.Errorf("container %s does not mount ovs-run at /var/run/openvswitch", c.Name)
		}
	}
	if got := flagValue(fs.Args, "ovs-rundir"); got != "/var/run/openvswitch" {
		t.Errorf("flowstated --ovs-rundir=%q", got)
	}
	// OVN's run directory, read-only, where --ovn-rundir looks.
	if i := slices.IndexFunc(fs.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ovn-run" }); i < 0 ||
		fs.VolumeMounts[i].MountPath != flagValue(fs.Args, "ovn-rundir") || !fs.VolumeMounts[i].ReadOnly {
		t.Errorf("flowstated does not mount ovn-run read-only at its --ovn-rundir=%q", flagValue(fs.Args, "ovn-rundir"))
	}
	for _, c := range []*corev1.Container{fs, guard} {
		if got := flagValue(c.Args, "ovsdb"); got != "unix:/var/run/openvswitch/db.sock" {
			t.Errorf("%s --ovsdb=%q, want the ovs-run mount's db.sock", c.Name, got)
		}
	}

	// The guard: same lease and grace as flowstated's, and probes that
	// read that lease's heartbeat with that grace.
	lease, grace := flagValue(fs.Args, "guard-lease"), flagValue(fs.Args, "guard-grace")
	if flagValue(guard.Args, "lease") != lease || flagValue(guard.Args, "grace") != grace {
		t.Errorf("guard --lease/--grace %q/%q, flowstated's --guard-lease/--guard-grace %q/%q",
			flagValue(guard.Args, "lease"), flagValue(guard.Args, "grace"), lease, grace)
	}
	wantProbe := []string{"/usr/local/bin/flowstated", "guard", "probe", "--lease=" + lease, "--grace=" + grace}
	for what, p := range map[string]*corev1.Probe{"startup": guard.StartupProbe, "readiness": guard.ReadinessProbe} {
		if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, wantProbe) {
			t.Errorf("guard %s probe %+v, want exec %q", what, p, wantProbe)
		}
	}

	// flowstated is ready once its node converged, not once its API
	// answers: a rolling update waits for that on each node.
	rp := fs.ReadinessProbe
	wantReady := []string{"/usr/local/bin/flowctl", "--server=unix:///run/flowstate/flowstate.sock", "--timeout=2s", "wait", "--converged"}
	if rp == nil || rp.Exec == nil || !slices.Equal(rp.Exec.Command, wantReady) {
		t.Errorf("flowstated readiness probe %+v, want exec %q", rp, wantReady)
	} else if rp.TimeoutSeconds <= 2 {
		t.Errorf("flowstated readiness probe timeoutSeconds %d: not above flowctl's --timeout=2s", rp.TimeoutSeconds)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("rolling update %+v, want maxUnavailable 1", ru)
	}

	// Metrics: flowstated on loopback only; the proxy on the node address,
	// over TLS, only /metrics, to flowstated's loopback listener.
	metrics := flagValue(fs.Args, "metrics-listen")
	if !strings.HasPrefix(metrics, "127.0.0.1:") {
		t.Errorf("flowstated --metrics-listen=%q: not loopback", metrics)
	}
	if got := flagValue(proxy.Args, "upstream"); got != "http://"+metrics+"/" {
		t.Errorf("kube-rbac-proxy --upstream=%q, want flowstated's %s", got, metrics)
	}
	if got := flagValue(proxy.Args, "allow-paths"); got != "/metrics" {
		t.Errorf("kube-rbac-proxy --allow-paths=%q, want /metrics only", got)
	}
	if got := flagValue(proxy.Args, "secure-listen-address"); got != "$(HOST_IP):9453" {
		t.Errorf("kube-rbac-proxy --secure-listen-address=%q", got)
	}
	if flagValue(proxy.Args, "insecure-listen-address") != "" {
		t.Error("kube-rbac-proxy has an insecure listener")
	}
	if i := slices.IndexFunc(proxy.Env, func(e corev1.EnvVar) bool { return e.Name == "HOST_IP" }); i < 0 ||
		proxy.Env[i].ValueFrom == nil || proxy.Env[i].ValueFrom.FieldRef == nil || proxy.Env[i].ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Error("kube-rbac-proxy has no HOST_IP from status.hostIP")
	}
	if o.svc.Spec.Ports[0].TargetPort.String() != proxy.Ports[0].Name || proxy.Ports[0].ContainerPort != 9453 {
		t.Errorf("Service targets %s, the proxy's port is %s:%d", o.svc.Spec.Ports[0].TargetPort.String(), proxy.Ports[0].Name, proxy.Ports[0].ContainerPort)
	}

	// The token only in the proxy; its service account may review tokens
	// and access, nothing else.
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the pod automounts a service account token")
	}
	for _, c := range pod.Spec.Containers {
		has := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kube-api-access" })
		if has != (c.Name == "kube-rbac-proxy") {
			t.Errorf("container %s: token mounted %v", c.Name, has)
		}
	}
	if pod.Spec.ServiceAccountName != o.sa.Name || o.sa.Namespace != ds.Namespace {
		t.Errorf("pod service account %q, manifest's %s/%s", pod.Spec.ServiceAccountName, o.sa.Namespace, o.sa.Name)
	}
	b, r := o.bindings["flowstate-kube-rbac-proxy"], o.roles["flowstate-kube-rbac-proxy"]
	if b == nil || r == nil || b.RoleRef.Name != r.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != o.sa.Name || b.Subjects[0].Namespace != o.sa.Namespace {
		t.Fatalf("the proxy's ClusterRole is not bound to the pod's service account: %+v %+v", b, r)
	}
	var granted []string
	for _, rule := range r.Rules {
		for _, res := range rule.Resources {
			granted = append(granted, fmt.Sprintf("%s/%s:%s", rule.APIGroups[0], res, strings.Join(rule.Verbs, ",")))
		}
	}
	slices.Sort(granted)
	if want := []string{"authentication.k8s.io/tokenreviews:create", "authorization.k8s.io/subjectaccessreviews:create"}; !slices.Equal(granted, want) {
		t.Errorf("the proxy may %q, want %q", granted, want)
	}
	if rd := o.roles["flowstate-metrics-reader"]; rd == nil || len(rd.Rules) != 1 || !slices.Equal(rd.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(rd.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("flowstate-metrics-reader: %+v, want get of /metrics only", rd)
	}
}

// TestAntreaOverlay: kubectl's kustomize renders the Antrea overlay into
// the same objects, strictly decodable, with only the OVS run directory
// changed.
func TestAntreaOverlay(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not found: the Antrea overlay cannot be rendered (install kubectl, https://kubernetes.io/docs/tasks/tools/)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	render := func(dir string) objects {
		out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		return decodeManifest(t, bytes.TrimSpace(out))
	}
	base, antrea := render("kubernetes"), render("kubernetes-antrea")
	path := func(o objects) string {
		for _, v := range o.ds.Spec.Template.Spec.Volumes {
			if v.Name == "ovs-run" {
				return v.HostPath.Path
			}
		}
		return ""
	}
	if path(base) != "/var/run/openvswitch" || path(antrea) != "/var/run/antrea/openvswitch" {
		t.Fatalf("ovs-run hostPath: base %q, antrea %q", path(base), path(antrea))
	}
	for i := range antrea.ds.Spec.Template.Spec.Volumes {
		if v := &antrea.ds.Spec.Template.Spec.Volumes[i]; v.Name == "ovs-run" {
			v.HostPath.Path = path(base)
		}
	}
	// A strategic merge patch moves the volume it patches first.
	for _, o := range []objects{base, antrea} {
		slices.SortFunc(o.ds.Spec.Template.Spec.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
	}
	a, _ := yaml.Marshal(antrea.ds)
	b, _ := yaml.Marshal(base.ds)
	if !bytes.Equal(a, b) {
		t.Errorf("the overlay changes more than the OVS run directory:\n%s\n---\n%s", a, b)
	}
	// And the manifest as given to kubectl apply -f is what -k renders.
	direct := decodeManifest(t, readManifest(t))
	slices.SortFunc(direct.ds.Spec.Template.Spec.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
	d, _ := yaml.Marshal(direct.ds)
	if !bytes.Equal(d, b) {
		t.Error("kubectl apply -k deploy/kubernetes renders another DaemonSet than the file")
	}
}
