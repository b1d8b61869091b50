// Package render writes the configuration files and command lines of the
// local cluster's components: containerd, kubelet, kube-proxy, the control
// plane, kubeconfigs, and the cluster DNS manifests. It holds the settings
// that make Kubernetes run in network namespaces on the project's machines
// (see docs/background.md#kubernetes-inside-network-namespaces) and does no
// I/O.
package render

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"text/template"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// Paths of a node's runtime as the node's processes see them: each node's
// containerd, kubelet and pods run in a mount namespace of their own in which
// these standard paths are bind mounts of the node's directories in the lab's
// state directory.
const (
	ContainerdRoot   = "/var/lib/containerd"
	ContainerdState  = "/run/containerd"
	ContainerdSocket = "/run/containerd/containerd.sock"
	CNIBinDir        = "/opt/cni/bin"
	CNIConfDir       = "/etc/cni/net.d"
)

// Image names in the nodes' containerd. They are imported from tarballs, never
// pulled.
const (
	PauseImage   = "docker.io/library/vcoil-pause:lab"
	AgentImage   = "vcoil-e2e-agent:lab"
	CoreDNSImage = "vcoil-coredns:lab"
	VcoilImage   = "ghcr.io/vcoil/vcoil:lab"
)

func execute(tmpl string, data any) string {
	t := template.Must(template.New("").Option("missingkey=error").Parse(tmpl))
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		panic(err) // the templates are constants: a failure is a bug
	}
	return b.String()
}

// ContainerdConfig is a node's containerd configuration (format version 2,
// containerd 1.6). restrict_oom_score_adj keeps runc from setting an OOM
// score below its own, which it may not do without CAP_SYS_RESOURCE.
func ContainerdConfig() string {
	return execute(`version = 2
root = "{{.Root}}"
state = "{{.State}}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{{.Socket}}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Pause}}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.CNIConf}}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
`, map[string]string{
		"Root": ContainerdRoot, "State": ContainerdState, "Socket": ContainerdSocket,
		"Pause": PauseImage, "CNIBin": CNIBinDir, "CNIConf": CNIConfDir,
	})
}

// Kubelet describes one node's kubelet.
type Kubelet struct {
	NodeName string
	// CAFile verifies clients (the apiserver calling for logs and exec).
	CAFile string
	// TLSCertFile and TLSKeyFile are the kubelet's serving certificate.
	TLSCertFile, TLSKeyFile string
	// ResolvConf is handed to pods with dnsPolicy Default (and to CoreDNS).
	ResolvConf string
	// CgroupRoot is the node's own cgroup subtree ("/vcoil-lab-node1").
	CgroupRoot string
	// DNS are the cluster DNS's ClusterIPs, one per family, IPv4 first:
	// pods get them all as nameservers.
	DNS []netip.Addr
}

// KubeletConfig is the node's KubeletConfiguration. Settings for running
// several kubelets on one machine of the project's kind: cgroup v1 accepted,
// cgroupfs, no swap check, image garbage collection off (imported images
// cannot be pulled again), no node allocatable enforcement or eviction.
func KubeletConfig(k Kubelet) string {
	return execute(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Socket}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
evictionHard: {}
resolvConf: {{.ResolvConf}}
clusterDomain: {{.Domain}}
clusterDNS:
{{- range .DNS}}
- {{.}}
{{- end}}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{.CAFile}}
authorization:
  mode: Webhook
tlsCertFile: {{.TLSCertFile}}
tlsPrivateKeyFile: {{.TLSKeyFile}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
serializeImagePulls: false
registerNode: true
`, map[string]any{
		"CgroupRoot": k.CgroupRoot, "Socket": ContainerdSocket, "ResolvConf": k.ResolvConf,
		"Domain": topology.ClusterDomain, "DNS": k.DNS,
		"CAFile": k.CAFile, "TLSCertFile": k.TLSCertFile, "TLSKeyFile": k.TLSKeyFile,
	})
}

// KubeletArgs is the kubelet's command line.
func KubeletArgs(node topology.Node, configFile, kubeconfig string) []string {
	return []string{
		"--config=" + configFile,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + node.Name,
		// Both families' addresses in a dual-stack lab: the node's
		// InternalIPs, and its pods' HostIPs.
		"--node-ip=" + JoinAddrs(node.IPs()),
		// The DaemonSets of vcoil's lab overlays choose their nodes by it.
		"--node-labels=" + LabelDataplane + "=" + node.Dataplane,
		"--v=1",
	}
}

// KubeProxyConfig is a node's kube-proxy configuration: nftables mode (the
// kernel has no IPVS), and no conntrack table sizing, which only the initial
// network namespace may do.
func KubeProxyConfig(node topology.Node, kubeconfig string) string {
	return execute(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: {{.Name}}
clusterCIDR: {{.Pods}}
clientConnection:
  kubeconfig: {{.Kubeconfig}}
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`, map[string]string{"Name": node.Name, "Pods": topology.PodPool.String(), "Kubeconfig": kubeconfig})
}

// ControlPlane holds the files the control plane reads.
type ControlPlane struct {
	EtcdDataDir string
	CAFile      string
	CAKeyFile   string
	// APIServerCert/Key serve the apiserver; KubeletClientCert/Key are the
	// apiserver's client identity towards the kubelets.
	APIServerCert, APIServerKey         string
	KubeletClientCert, KubeletClientKey string
	// ServiceAccountKey signs tokens; ServiceAccountPub checks them.
	ServiceAccountKey, ServiceAccountPub string
	ControllerManagerKubeconfig          string
	SchedulerKubeconfig                  string
	// ServiceCIDRs are the Service ranges, IPv4 first (both families in a
	// dual-stack lab).
	ServiceCIDRs []netip.Prefix
}

// EtcdArgs runs etcd on the control plane's loopback only.
func EtcdArgs(cp ControlPlane) []string {
	return []string{
		"--name=lab", "--data-dir=" + cp.EtcdDataDir,
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=lab=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		"--unsafe-no-fsync", "--log-level=warn",
	}
}

// APIServerArgs: admission webhooks and aggregated APIs are reached through
// the endpoints of their Service (--enable-aggregator-routing), because the
// control plane's namespace has no kube-proxy to translate ClusterIPs.
func APIServerArgs(cp ControlPlane) []string {
	return []string{
		"--advertise-address=" + topology.ControlPlaneIP.String(),
		"--bind-address=0.0.0.0",
		fmt.Sprintf("--secure-port=%d", topology.APIServerPort),
		"--etcd-servers=http://127.0.0.1:2379",
		"--service-cluster-ip-range=" + joinPrefixes(cp.ServiceCIDRs),
		"--client-ca-file=" + cp.CAFile,
		"--tls-cert-file=" + cp.APIServerCert, "--tls-private-key-file=" + cp.APIServerKey,
		"--kubelet-client-certificate=" + cp.KubeletClientCert, "--kubelet-client-key=" + cp.KubeletClientKey,
		"--kubelet-certificate-authority=" + cp.CAFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc." + topology.ClusterDomain,
		"--service-account-key-file=" + cp.ServiceAccountPub,
		"--service-account-signing-key-file=" + cp.ServiceAccountKey,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--enable-aggregator-routing=true",
		"--profiling=false",
		"--v=1",
	}
}

// ControllerManagerArgs: no node IPAM (vcoil gives out addresses), service
// account tokens per controller.
func ControllerManagerArgs(cp ControlPlane) []string {
	return []string{
		"--kubeconfig=" + cp.ControllerManagerKubeconfig,
		"--authentication-kubeconfig=" + cp.ControllerManagerKubeconfig,
		"--authorization-kubeconfig=" + cp.ControllerManagerKubeconfig,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + cp.ServiceAccountKey,
		"--root-ca-file=" + cp.CAFile,
		"--cluster-signing-cert-file=" + cp.CAFile, "--cluster-signing-key-file=" + cp.CAKeyFile,
		"--allocate-node-cidrs=false",
		"--service-cluster-ip-range=" + joinPrefixes(cp.ServiceCIDRs),
		"--v=1",
	}
}

// SchedulerArgs runs the scheduler without leader election.
func SchedulerArgs(cp ControlPlane) []string {
	return []string{
		"--kubeconfig=" + cp.SchedulerKubeconfig,
		"--authentication-kubeconfig=" + cp.SchedulerKubeconfig,
		"--authorization-kubeconfig=" + cp.SchedulerKubeconfig,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--v=1",
	}
}

// Kubeconfig is a kubeconfig with the CA, client certificate and key
// embedded, for the apiserver at server.
func Kubeconfig(server, user string, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["vcoil-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["vcoil-lab"] = &clientcmdapi.Context{Cluster: "vcoil-lab", AuthInfo: user}
	cfg.CurrentContext = "vcoil-lab"
	return clientcmd.Write(*cfg)
}

// ResolvConf is the nodes' resolv.conf: a nameserver nobody answers at.
func ResolvConf() string {
	return "# vcoil lab: no DNS outside the cluster\nnameserver " + topology.DeadNameserver.String() + "\noptions timeout:1 attempts:1\n"
}

// CoreDNSManifests is the cluster DNS: CoreDNS as a Deployment with its
// RBAC and the kube-dns Service at the DNS ClusterIP.
// In a dual-stack lab the Service has a ClusterIP of each family
// (RequireDualStack), and CoreDNS answers AAAA queries from the IPv6
// ClusterIPs and pod addresses it watches.
func CoreDNSManifests(replicas int, ips []netip.Addr) string {
	return execute(coreDNSManifests, map[string]any{
		"Image": CoreDNSImage, "IPs": ips, "Domain": topology.ClusterDomain,
		"Replicas": replicas,
	})
}

const coreDNSManifests = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes {{.Domain}} in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        prometheus :9153
        forward . /etc/resolv.conf
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: {{.Replicas}}
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      tolerations:
      - key: CriticalAddonsOnly
        operator: Exists
      containers:
      - name: coredns
        image: {{.Image}}
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          initialDelaySeconds: 10
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: {{index .IPs 0}}
{{- if gt (len .IPs) 1}}
  ipFamilyPolicy: RequireDualStack
  clusterIPs:
{{- range .IPs}}
  - {{.}}
{{- end}}
{{- end}}
  selector:
    k8s-app: kube-dns
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
`

// EnvFile is lab.env: what a test or a person needs to find the lab, as
// shell assignments. agent is the network test agent's binary, which the
// e2e suite runs on the external host as a client from outside the cluster.
func EnvFile(topo topology.Topology, stateDir, kubeconfig, kubectl, kubernetesDir, agent string) string {
	var b strings.Builder
	w := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, v) }
	w("KUBECONFIG", kubeconfig)
	w("VCOIL_LAB_KUBECTL", kubectl)
	w("VCOIL_LAB_KUBERNETES_DIR", kubernetesDir)
	w("VCOIL_LAB_APISERVER", topology.APIServerURL())
	w("VCOIL_LAB_CONTROL_PLANE_NETNS", "/run/netns/"+topology.ControlPlaneNetns)
	w("VCOIL_LAB_EXTERNAL_NETNS", "/run/netns/"+topology.ExternalNetns)
	w("VCOIL_LAB_EXTERNAL_IP", topology.ExternalIP.String())
	w("VCOIL_LAB_AGENT_TCP_PORT", fmt.Sprint(topology.AgentTCPPort))
	w("VCOIL_LAB_AGENT_UDP_PORT", fmt.Sprint(topology.AgentUDPPort))
	w("VCOIL_LAB_AGENT_HTTP_PORT", fmt.Sprint(topology.AgentHTTPPort))
	w("VCOIL_LAB_AGENT_IMAGE", AgentImage)
	w("VCOIL_LAB_IP_FAMILY", topo.IPFamily)
	var names, ips, ips6 []string
	for _, n := range topo.NodeList() {
		names = append(names, n.Name)
		ips = append(ips, n.IP.String())
		if n.IP6.IsValid() {
			ips6 = append(ips6, n.IP6.String())
		}
	}
	w("VCOIL_LAB_NODES", strings.Join(names, ","))
	var vpp []string
	for _, n := range topo.VPPNodes() {
		vpp = append(vpp, n.Name)
	}
	// The nodes whose dataplane is VPP, and where each one's VPP writes
	// its PID (the VPP-restart case of the e2e suite kills it).
	w("VCOIL_LAB_VPP_NODES", strings.Join(vpp, ","))
	w("VCOIL_LAB_VPP_PIDFILE", stateDir+"/"+vppPidfile)
	w("VCOIL_LAB_NODE_IPS", strings.Join(ips, ","))
	w("VCOIL_LAB_SERVICE_CIDR", topology.ServiceCIDR.String())
	w("VCOIL_LAB_POD_POOL", topology.PodPool.String())
	w("VCOIL_LAB_LB_POOL", topology.LBPool.String())
	w("VCOIL_LAB_DNS_IP", topology.DNSServiceIP.String())
	if topo.Dual() {
		w("VCOIL_LAB_NODE_IPS6", strings.Join(ips6, ","))
		w("VCOIL_LAB_EXTERNAL_IP6", topology.ExternalIP6.String())
		w("VCOIL_LAB_SERVICE_CIDR6", topology.ServiceCIDR6.String())
		w("VCOIL_LAB_POD_POOL6", topology.PodPool6.String())
		w("VCOIL_LAB_LB_POOL6", topology.LBPool6.String())
		w("VCOIL_LAB_DNS_IP6", topology.DNSServiceIP6.String())
	}
	// The settings of the e2e suite (v2/e2e/suite).
	w("VCOIL_E2E_KUBECONFIG", kubeconfig)
	w("VCOIL_E2E_AGENT_IMAGE", AgentImage)
	w("VCOIL_E2E_PULL_POLICY", "Never")
	w("VCOIL_E2E_EXTERNAL", fmt.Sprintf("%s:%d", topology.ExternalIP, topology.AgentTCPPort))
	if topo.Dual() {
		// The suite runs its matrix once per family it finds in the
		// cluster; this is its IPv6 external host.
		w("VCOIL_E2E_EXTERNAL6", netip.AddrPortFrom(topology.ExternalIP6, topology.AgentTCPPort).String())
	}
	w("VCOIL_E2E_KUBECTL", kubectl)
	w("VCOIL_E2E_EXTERNAL_AGENT", fmt.Sprintf("nsenter --net=/run/netns/%s -- %s", topology.ExternalNetns, agent))
	return b.String()
}

// APIServerIPs are the addresses the apiserver's certificate must name.
func APIServerIPs(topo topology.Topology) []netip.Addr {
	return append(topo.ControlPlaneIPs(), topology.APIServiceIP, netip.MustParseAddr("127.0.0.1"))
}

// JoinAddrs writes addresses comma-separated, as --node-ip and --peer take them.
func JoinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// APIServerDNSNames are the names the apiserver's certificate must name.
func APIServerDNSNames() []string {
	return []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + topology.ClusterDomain}
}
