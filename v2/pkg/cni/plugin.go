package cni

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// How long the binary waits for vcoild, dial included. A daemon that is
// not there fails at once (the gRPC calls do not wait for a connection),
// so these bound only a daemon that is there and slow.
const (
	// AddTimeout is generous because ADD may have to wait until
	// vcoil-controller answers a BlockRequest with a new AddressBlock. It
	// equals kubelet's default --runtime-request-timeout, after which
	// nobody waits for the answer anyway.
	AddTimeout = 2 * time.Minute
	// DelTimeout covers the release of the address and the teardown of the
	// pod's interface and dataplane state.
	DelTimeout = time.Minute
	// CheckTimeout covers reading back the pod's dataplane state.
	CheckTimeout = 30 * time.Second
	// StatusTimeout is short: STATUS only asks whether vcoild is ready, and
	// the runtime calls it often.
	StatusTimeout = 10 * time.Second
	// GCTimeout covers releasing every stale attachment of the node.
	GCTimeout = 2 * time.Minute
)

// Plugin carries out the CNI verbs by forwarding them to vcoild. Its
// methods have the signature of skel.CNIFuncs; Funcs hands them to skel.
type Plugin struct {
	stdout   io.Writer
	timeouts timeouts
}

type timeouts struct {
	add, del, check, status, gc time.Duration
}

// NewPlugin returns a Plugin that prints ADD's result to stdout.
func NewPlugin(stdout io.Writer) *Plugin {
	return &Plugin{
		stdout:   stdout,
		timeouts: timeouts{add: AddTimeout, del: DelTimeout, check: CheckTimeout, status: StatusTimeout, gc: GCTimeout},
	}
}

// Funcs returns the plugin's verbs for skel.PluginMainFuncs. VERSION is
// answered by skel from cnicontract.PluginInfo.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// Add asks vcoild to attach the container and prints vcoild's result in
// the cniVersion of the configuration. vcoild answers with a result of
// version 1.1.0 (AddResponse.result); the binary converts it down.
// K8S_POD_NAMESPACE and K8S_POD_NAME are required in CNI_ARGS, because
// vcoild chooses the address pool by the pod's namespace.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	req, err := rpcArgs(args, true)
	if err != nil {
		return err
	}
	for _, key := range []string{ArgPodNamespace, ArgPodName} {
		if req.Args[key] == "" {
			return argsError(key+" is missing", "vcoil attaches Kubernetes pods only; kubelet passes their namespace and name")
		}
	}
	var resp *cnirpc.AddResponse
	err = p.call(conf.Socket, p.timeouts.add, func(ctx context.Context, c cnirpc.CNIClient) (err error) {
		resp, err = c.Add(ctx, req)
		return err
	})
	if err != nil {
		return cnicontract.FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
	}
	return p.printResult(resp.GetResult(), conf.CNIVersion)
}

// Del asks vcoild to detach the container. It succeeds when vcoild says
// it does not know the container: the spec wants DEL to succeed when
// there is nothing left to remove. CNI_ARGS that cannot be parsed are
// dropped rather than refused, because a DEL that always fails leaves the
// pod's sandbox undeletable; vcoild finds the attachment by container ID
// and interface.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	req, err := rpcArgs(args, false)
	if err != nil {
		return err
	}
	err = p.call(conf.Socket, p.timeouts.del, func(ctx context.Context, c cnirpc.CNIClient) error {
		_, err := c.Del(ctx, req)
		return err
	})
	if err != nil && !cnicontract.IsUnknownContainer(err) {
		return cnicontract.FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
	}
	return nil
}

// Check asks vcoild whether the container is attached as prevResult (in
// the configuration it forwards) says.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	req, err := rpcArgs(args, true)
	if err != nil {
		return err
	}
	err = p.call(conf.Socket, p.timeouts.check, func(ctx context.Context, c cnirpc.CNIClient) error {
		_, err := c.Check(ctx, req)
		return err
	})
	if err != nil {
		return cnicontract.FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
	}
	return nil
}

// Status succeeds when vcoild says it can add pods. An unreachable vcoild
// is error 50 (plugin not available), as spec 1.1.0 defines for STATUS.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	err = p.call(conf.Socket, p.timeouts.status, func(ctx context.Context, c cnirpc.CNIClient) error {
		_, err := c.Status(ctx, &cnirpc.Empty{})
		return err
	})
	if err != nil {
		return cnicontract.FromRPCError(err, cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE)
	}
	return nil
}

// GC forwards the runtime's list of valid attachments, and the whole
// configuration, to vcoild, which releases every other attachment. A GC
// without the list is refused: taken as empty, it would release every pod
// of the node.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.ValidAttachments == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, cnicontract.KeyValidAttachments+": missing",
			"GC needs the runtime's list of the attachments that are still valid")
	}
	req := &cnirpc.GCRequest{StdinData: args.StdinData}
	for _, a := range conf.ValidAttachments {
		req.ValidAttachments = append(req.ValidAttachments, &cnirpc.Attachment{ContainerId: a.ContainerID, Ifname: a.IfName})
	}
	err = p.call(conf.Socket, p.timeouts.gc, func(ctx context.Context, c cnirpc.CNIClient) error {
		_, err := c.GC(ctx, req)
		return err
	})
	if err != nil {
		return cnicontract.FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
	}
	return nil
}

// call runs one RPC on a fresh connection: the binary lives for one call.
func (p *Plugin) call(socket string, timeout time.Duration, rpc func(context.Context, cnirpc.CNIClient) error) error {
	conn, err := dial(socket)
	if err != nil {
		return fmt.Errorf("connect to vcoild at %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return rpc(ctx, cnirpc.NewCNIClient(conn))
}

// dial prepares a connection to vcoild; it connects on the first call.
// The custom dialer takes the path as it is, where a unix:// target would
// be parsed as a URL and trip on characters such as '%' or '?'.
func dial(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///vcoild",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}),
	)
}

// rpcArgs builds the request that carries one invocation to vcoild.
// Protobuf strings must be UTF-8, so the variables that skel does not check
// are checked here. With strictArgs false, CNI_ARGS that cannot be parsed
// are dropped (see Del).
func rpcArgs(args *skel.CmdArgs, strictArgs bool) (*cnirpc.CNIArgs, error) {
	for _, v := range []struct{ name, value string }{
		{"CNI_CONTAINERID", args.ContainerID},
		{"CNI_NETNS", args.Netns},
		{"CNI_IFNAME", args.IfName},
		{"CNI_PATH", args.Path},
	} {
		if !utf8.ValidString(v.value) {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, v.name+": not valid UTF-8", fmt.Sprintf("%q", v.value))
		}
	}
	kv, err := ParseArgs(args.Args)
	if err != nil {
		if strictArgs {
			return nil, err
		}
		kv = nil
	}
	return &cnirpc.CNIArgs{
		ContainerId: args.ContainerID,
		Netns:       args.Netns,
		Ifname:      args.IfName,
		Args:        kv,
		Path:        args.Path,
		StdinData:   args.StdinData,
	}, nil
}

// printResult converts vcoild's 1.1.0 result to the version the runtime
// asked for and prints it. The result is checked first, because the
// library's conversions assume well-formed results and would panic on,
// for example, a null entry in "ips".
func (p *Plugin) printResult(raw []byte, cniVersion string) error {
	if !slices.Contains(cnicontract.PluginInfo().SupportedVersions(), cniVersion) {
		// cnicontract.ParseConf has refused such a configuration already;
		// the library would take "" for 0.1.0 and print a result of that
		// version.
		return types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("cniVersion %q: not supported", cniVersion), "")
	}
	res, err := types100.NewResult(raw)
	if err != nil {
		return types.NewError(uint(cnirpc.ErrorCode_INTERNAL), "vcoild returned an invalid result", err.Error())
	}
	r, ok := res.(*types100.Result)
	if !ok {
		return types.NewError(uint(cnirpc.ErrorCode_INTERNAL), "vcoild returned an invalid result", fmt.Sprintf("unexpected result type %T", res))
	}
	if err := cnicontract.CheckResult(r); err != nil {
		return types.NewError(uint(cnirpc.ErrorCode_INTERNAL), "vcoild returned an invalid result", err.Error())
	}
	out, err := r.GetAsVersion(cniVersion)
	if err != nil {
		return types.NewError(uint(cnirpc.ErrorCode_INTERNAL), "convert vcoild's result to cniVersion "+cniVersion, err.Error())
	}
	if err := out.PrintTo(p.stdout); err != nil {
		return types.NewError(types.ErrIOFailure, "write the result", err.Error())
	}
	return nil
}
