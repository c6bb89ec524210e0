package server_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestServerHoldsNoRoom: package server reaches the rooms of the engine
// only through the interfaces the coordinator hands on (restore.Writes,
// restore.Flag, restore.Owners), never as the rooms' own types, which also
// carry what only the coordinator wires (write.Writes.Adopt,
// owner.Owners.Learning, Claim). A room is the type of a field of
// restore.Engine declared in a package under server/restore; no expression
// of the server's production code has one, nor a struct that holds one
// (what the rooms hand the proxies), and none asserts one of restore's
// interfaces to another type.
func TestServerHoldsNoRoom(t *testing.T) {
	fset := token.NewFileSet()
	pkg, files, info := typeCheckServer(t, fset)

	restore := restoreOf(t, pkg)
	engine, ok := restore.Scope().Lookup("Engine").Type().Underlying().(*types.Struct)
	if !ok {
		t.Fatal("restore.Engine is not a struct")
	}
	rooms := map[*types.TypeName]bool{}
	for f := range engine.Fields() {
		if n := named(f.Type()); n != nil && strings.HasPrefix(n.Obj().Pkg().Path(), module+"server/restore/") {
			rooms[n.Obj()] = true
		}
	}
	for _, want := range []string{"write.Writes", "owner.Owners", "flag.Flag", "vswitchd.Daemon"} {
		found := false
		for r := range rooms {
			found = found || r.Pkg().Name()+"."+r.Name() == want
		}
		if !found {
			t.Errorf("restore.Engine holds no %s: the rooms are found from its fields", want)
		}
	}

	var held []string
	sawEngine := false
	for e, tv := range info.Types {
		n := named(tv.Type)
		if n == nil {
			continue
		}
		sawEngine = sawEngine || n.Obj() == restore.Scope().Lookup("Engine")
		if rooms[n.Obj()] || handle(n, rooms) {
			held = append(held, fset.Position(e.Pos()).String()+": "+types.ExprString(e)+" is a "+tv.Type.String())
		}
	}
	if !sawEngine {
		t.Fatal("no expression of package server is a restore.Engine: the check saw nothing")
	}
	// Nor is a surface asserted back to what it hides (x.(interface{ Adopt(...) })).
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if a, ok := n.(*ast.TypeAssertExpr); ok {
				if x := named(info.TypeOf(a.X)); x != nil && x.Obj().Pkg() == restore && types.IsInterface(x) {
					held = append(held, fset.Position(a.Pos()).String()+": "+types.ExprString(a)+" asserts a restore."+x.Obj().Name())
				}
			}
			return true
		})
	}
	sort.Strings(held)
	for _, h := range held {
		t.Errorf("%s: the server reaches a room of the engine past its surface; hand the room on as an interface of package restore (surface.go)", h)
	}
}

// maxSurface is the most methods the server may reach of the engine in all
// (issue 32): the coordinator's own and those of the interfaces it hands on.
const maxSurface = 25

// TestEngineSurface: the server's whole reach into the engine, the exported
// methods of restore.Engine and of package restore's interfaces those
// return (Writes, Flag, Owners), stays within maxSurface; a new need is met
// by widening a method's answer (flag.State), not by another method.
func TestEngineSurface(t *testing.T) {
	fset := token.NewFileSet()
	pkg, _, _ := typeCheckServer(t, fset)
	restore := restoreOf(t, pkg)
	engine := types.NewPointer(restore.Scope().Lookup("Engine").Type())
	var reach []string
	handed := map[*types.TypeName]bool{}
	ms := types.NewMethodSet(engine)
	for sel := range ms.Methods() {
		m := sel.Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		reach = append(reach, "Engine."+m.Name())
		res := m.Signature().Results()
		for v := range res.Variables() {
			n := named(v.Type())
			if n == nil || n.Obj().Pkg() != restore || !types.IsInterface(n) || handed[n.Obj()] {
				continue
			}
			handed[n.Obj()] = true
			iface := n.Underlying().(*types.Interface)
			for im := range iface.Methods() {
				reach = append(reach, n.Obj().Name()+"."+im.Name())
			}
		}
	}
	if len(handed) == 0 {
		t.Fatal("restore.Engine hands on none of package restore's interfaces: the check saw nothing")
	}
	sort.Strings(reach)
	t.Logf("the server reaches %d methods of the engine: %s", len(reach), strings.Join(reach, " "))
	if len(reach) > maxSurface {
		t.Errorf("the server reaches %d methods of the engine, more than %d: %s", len(reach), maxSurface, strings.Join(reach, " "))
	}
}

// handle: n is a struct that holds a room (write's recorder holds its
// Writes, owner's keeper its Owners), the kind a room hands the proxies,
// which must reach the server as an interface (write.Recorder,
// ofproxy.Keeper); values that hold none (plan.Change, owner.Instance) pass.
func handle(n *types.Named, rooms map[*types.TypeName]bool) bool {
	p := n.Obj().Pkg()
	st, ok := n.Underlying().(*types.Struct)
	if p == nil || !strings.HasPrefix(p.Path(), module+"server/restore/") || !ok {
		return false
	}
	for f := range st.Fields() {
		if r := named(f.Type()); r != nil && rooms[r.Obj()] {
			return true
		}
	}
	return false
}

// restoreOf is package server/restore as pkg imports it.
func restoreOf(t *testing.T, pkg *types.Package) *types.Package {
	t.Helper()
	for _, p := range pkg.Imports() {
		if p.Path() == module+"server/restore" {
			return p
		}
	}
	t.Fatal("package server does not import server/restore")
	return nil
}

// named is t's named type, through pointers, slices and maps' values.
func named(t types.Type) *types.Named {
	for {
		switch u := types.Unalias(t).(type) {
		case *types.Named:
			return u
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		case *types.Map:
			t = u.Elem()
		default:
			return nil
		}
	}
}

// typeCheckServer type-checks the production files of package server
// against its dependencies' export data (go list -export).
func typeCheckServer(t *testing.T, fset *token.FileSet) (*types.Package, []*ast.File, *types.Info) {
	t.Helper()
	bp, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}", ".")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok {
			exports[path] = file
		}
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(bp.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	pkg, err := conf.Check(bp.ImportPath, fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	return pkg, files, info
}
