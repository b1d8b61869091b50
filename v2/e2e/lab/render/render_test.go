package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

func unmarshal(t *testing.T, doc string) map[string]any {
	t.Helper()
	out := map[string]any{}
	if err := sigsyaml.Unmarshal([]byte(doc), &out); err != nil {
		t.Fatalf("%v in:\n%s", err, doc)
	}
	return out
}

func TestKubeletConfigCarriesTheSettingsTheMachinesNeed(t *testing.T) {
	cfg := unmarshal(t, KubeletConfig(Kubelet{
		NodeName: "node1", CAFile: "/lab/pki/ca.crt", TLSCertFile: "/lab/k.crt", TLSKeyFile: "/lab/k.key",
		ResolvConf: "/lab/resolv.conf", CgroupRoot: "/vcoil-lab-node1",
		DNS: []netip.Addr{topology.DNSServiceIP},
	}))
	for key, want := range map[string]any{
		"kind": "KubeletConfiguration", "failCgroupV1": false, "cgroupDriver": "cgroupfs",
		"cgroupRoot": "/vcoil-lab-node1", "failSwapOn": false, "imageGCHighThresholdPercent": float64(100),
		"resolvConf": "/lab/resolv.conf", "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"tlsCertFile": "/lab/k.crt", "readOnlyPort": float64(0),
	} {
		if cfg[key] != want {
			t.Errorf("%s = %v, want %v", key, cfg[key], want)
		}
	}
	if dns := cfg["clusterDNS"].([]any); len(dns) != 1 || dns[0] != topology.DNSServiceIP.String() {
		t.Errorf("clusterDNS %v", dns)
	}
	authn := cfg["authentication"].(map[string]any)
	if authn["webhook"].(map[string]any)["enabled"] != true || authn["anonymous"].(map[string]any)["enabled"] != false ||
		authn["x509"].(map[string]any)["clientCAFile"] != "/lab/pki/ca.crt" {
		t.Errorf("authentication %v", authn)
	}
	if cfg["authorization"].(map[string]any)["mode"] != "Webhook" {
		t.Errorf("authorization %v", cfg["authorization"])
	}
	if len(cfg["enforceNodeAllocatable"].([]any)) != 0 || len(cfg["evictionHard"].(map[string]any)) != 0 {
		t.Error("node allocatable or eviction is enforced")
	}
}

func TestKubeProxyRunsInNftablesModeWithoutConntrackSizing(t *testing.T) {
	node := topology.Topology{Nodes: 1}.NodeList()[0]
	cfg := unmarshal(t, KubeProxyConfig(node, "/lab/kp.kubeconfig"))
	if cfg["mode"] != "nftables" || cfg["hostnameOverride"] != "node1" || cfg["clusterCIDR"] != topology.PodPool.String() {
		t.Errorf("config %v", cfg)
	}
	if cfg["conntrack"].(map[string]any)["maxPerCore"] != float64(0) {
		t.Errorf("conntrack %v", cfg["conntrack"])
	}
}

func TestContainerdConfigRestrictsOOMScoreAndUsesTheNodesCNIPaths(t *testing.T) {
	c := ContainerdConfig()
	for _, want := range []string{
		"restrict_oom_score_adj = true", "SystemdCgroup = false", `sandbox_image = "` + PauseImage + `"`,
		`bin_dir = "/opt/cni/bin"`, `conf_dir = "/etc/cni/net.d"`, `address = "/run/containerd/containerd.sock"`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
}

func TestAPIServerReachesWebhooksThroughEndpoints(t *testing.T) {
	args := strings.Join(APIServerArgs(ControlPlane{CAFile: "/ca", ServiceCIDRs: []netip.Prefix{topology.ServiceCIDR}}), " ")
	for _, want := range []string{
		"--enable-aggregator-routing=true", "--advertise-address=198.18.0.2", "--service-cluster-ip-range=" + topology.ServiceCIDR.String(),
		"--authorization-mode=Node,RBAC", "--kubelet-certificate-authority=/ca",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("apiserver args lack %s", want)
		}
	}
}

func TestKubeconfigLoads(t *testing.T) {
	b, err := Kubeconfig(topology.APIServerURL(), "admin", []byte("ca"), []byte("cert"), []byte("key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.Clusters[ctx.Cluster].Server != "https://198.18.0.2:6443" || string(cfg.AuthInfos[ctx.AuthInfo].ClientKeyData) != "key" {
		t.Errorf("kubeconfig %+v", cfg)
	}
}

func coreDNSKinds(t *testing.T, ips ...netip.Addr) map[string]map[string]any {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(CoreDNSManifests(2, ips)), 4096)
	kinds := map[string]map[string]any{}
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		kinds[obj["kind"].(string)] = obj
	}
	return kinds
}

func TestCoreDNSManifestsDecode(t *testing.T) {
	kinds := coreDNSKinds(t, topology.DNSServiceIP)
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if kinds[k] == nil {
			t.Errorf("no %s", k)
		}
	}
	if ip := kinds["Service"]["spec"].(map[string]any)["clusterIP"]; ip != topology.DNSServiceIP.String() {
		t.Errorf("kube-dns at %v", ip)
	}
	if !strings.Contains(kinds["ConfigMap"]["data"].(map[string]any)["Corefile"].(string), "kubernetes cluster.local") {
		t.Error("Corefile does not serve cluster.local")
	}
	if spec := kinds["Service"]["spec"].(map[string]any); spec["ipFamilyPolicy"] != nil || spec["clusterIPs"] != nil {
		t.Errorf("single-stack kube-dns has families set: %v", spec)
	}
}

// In a dual-stack lab every part that names an address of the cluster
// names both families, IPv4 first.
func TestDualStackLabNamesBothFamilies(t *testing.T) {
	topo, err := topology.Topology{Nodes: 2}.WithIPFamily(topology.IPFamilyDual)
	if err != nil {
		t.Fatal(err)
	}
	spec := coreDNSKinds(t, topo.DNSServiceIPs()...)["Service"]["spec"].(map[string]any)
	if spec["clusterIP"] != "198.18.16.10" || spec["ipFamilyPolicy"] != "RequireDualStack" ||
		fmt.Sprint(spec["clusterIPs"]) != "[198.18.16.10 2001:db8:18:16::a]" {
		t.Errorf("kube-dns %v", spec)
	}
	cfg := unmarshal(t, KubeletConfig(Kubelet{DNS: topo.DNSServiceIPs()}))
	if fmt.Sprint(cfg["clusterDNS"]) != "[198.18.16.10 2001:db8:18:16::a]" {
		t.Errorf("clusterDNS %v", cfg["clusterDNS"])
	}
	if args := strings.Join(KubeletArgs(topo.NodeList()[1], "c", "k"), " "); !strings.Contains(args, "--node-ip=198.18.0.12,2001:db8:18::12 ") {
		t.Errorf("kubelet %s", args)
	}
	cp := ControlPlane{ServiceCIDRs: topo.ServiceCIDRs()}
	for name, args := range map[string][]string{"apiserver": APIServerArgs(cp), "controller-manager": ControllerManagerArgs(cp)} {
		if !slices.Contains(args, "--service-cluster-ip-range=198.18.16.0/20,2001:db8:18:16::/112") {
			t.Errorf("%s %v", name, args)
		}
	}
	env := EnvFile(topo, "/lab", "/k", "/kubectl", "/k8s", "/agent")
	for _, want := range []string{"VCOIL_LAB_IP_FAMILY=dual\n", "VCOIL_LAB_NODE_IPS6=2001:db8:18::11,2001:db8:18::12\n",
		"VCOIL_E2E_EXTERNAL6=[2001:db8:113::10]:8080\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("lab.env lacks %q:\n%s", want, env)
		}
	}
	if ips := APIServerIPs(topo); !slices.Contains(ips, topology.ControlPlaneIP6) {
		t.Errorf("apiserver certificate names %v", ips)
	}
}

func TestEnvFileNamesTheNodes(t *testing.T) {
	env := EnvFile(topology.Topology{Nodes: 2, Dataplanes: []string{"linux", "vpp"}}, "/lab", "/lab/admin.kubeconfig", "/lab/bin/kubectl", "/k8s", "/lab/bin/agent")
	for _, want := range []string{"KUBECONFIG=/lab/admin.kubeconfig\n", "VCOIL_LAB_NODES=node1,node2\n",
		"VCOIL_LAB_VPP_NODES=node2\n", "VCOIL_LAB_VPP_PIDFILE=/lab/vpp/{node}/vpp.pid\n", "VCOIL_LAB_NODE_IPS=198.18.0.11,198.18.0.12\n", "VCOIL_LAB_EXTERNAL_IP=203.0.113.10\n",
		"VCOIL_E2E_EXTERNAL_AGENT=nsenter --net=/run/netns/vcoil-lab-ext -- /lab/bin/agent\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("lab.env lacks %q:\n%s", want, env)
		}
	}
}

// A VPP node's VPP takes the fabric link and the node's address, attaches
// the host interconnect vcoild adopts, and hands the kernel what it does
// not serve; its kernel keeps the address on lo and routes through VPP.
func TestVPPNodeConfiguration(t *testing.T) {
	topo, err := topology.New(2, "linux", "vpp")
	if err != nil {
		t.Fatal(err)
	}
	n := topo.NodeList()[1]
	if n.Dataplane != topology.DataplaneVPP || topo.NodeList()[0].Dataplane != topology.DataplaneLinux {
		t.Fatalf("dataplanes %q, %q: want linux, vpp", topo.NodeList()[0].Dataplane, n.Dataplane)
	}
	cli := VPPStartupCLI(n)
	for _, want := range []string{
		"create host-interface v2 name eth0 rx-per-block 496 tx-per-block 496\n",
		"set interface mtu packet 1500 host-eth0\n",
		"set interface ip address host-eth0 198.18.0.12/24\n",
		"create host-interface v2 name vcoilvpp rx-per-block 496 tx-per-block 496\n",
		"set interface ip address host-vcoilvpp 169.254.100.1/30\n",
		"ip route add 0.0.0.0/0 via 198.18.0.1 host-eth0\n",
		"ip punt redirect add rx all via 169.254.100.2 host-vcoilvpp\n",
		"set punt udp all\n",
	} {
		if !strings.Contains(cli, want) {
			t.Errorf("startup CLI lacks %q:\n%s", want, cli)
		}
	}
	conf := VPPStartupConf(n, "/lab/vpp/node2/startup.cli", "/logs/node2-vpp-internal.log")
	for _, want := range []string{"socksvr { socket-name /run/vpp/api.sock }", "pidfile /run/vpp/vpp.pid", "startup-config /lab/vpp/node2/startup.cli",
		"api-segment { prefix vcoil-lab-node2 }", "plugin dpdk_plugin.so { disable }"} {
		if !strings.Contains(conf, want) {
			t.Errorf("startup.conf lacks %q:\n%s", want, conf)
		}
	}
	var cmds []string
	for _, c := range VPPNodeNetwork(n) {
		cmds = append(cmds, strings.Join(c, " "))
	}
	all := strings.Join(cmds, "\n")
	for _, want := range []string{
		"ip addr add 198.18.0.12/32 dev lo",
		"ip route add 198.18.0.0/24 via 169.254.100.1 dev vcoilhost src 198.18.0.12",
		"ip route add default via 169.254.100.1 dev vcoilhost src 198.18.0.12",
		"sysctl -q -w net.ipv4.conf.eth0.arp_ignore=8",
		"sysctl -q -w net.ipv4.conf.vcoilhost.arp_announce=2",
		"type filter hook ingress device eth0 priority 0 ; policy drop",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the VPP node's network lacks %q:\n%s", want, all)
		}
	}
	if args := strings.Join(KubeletArgs(n, "c", "k"), " "); !strings.Contains(args, "--node-labels=vcoil.io/dataplane=vpp") {
		t.Errorf("kubelet args %s lack the dataplane label", args)
	}
}
