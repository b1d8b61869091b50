package policy_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/policyoracle"
)

var (
	flagSeed     = flag.Uint64("policy.seed", 0, "first seed of the policy property test (0: from VCOIL_POLICY_SEED, else the clock)")
	flagClusters = flag.Int("policy.clusters", 0, "number of random clusters of the policy property test (0: from VCOIL_POLICY_CLUSTERS, else 2000, and 300 for the stage in the kernel)")
)

// propertySettings returns the first seed and the number of clusters: flags
// first, then the environment, then a clock seed and defaultClusters.
func propertySettings(t *testing.T, defaultClusters int) (uint64, int) {
	seed, n := *flagSeed, *flagClusters
	if seed == 0 {
		if s := os.Getenv("VCOIL_POLICY_SEED"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("VCOIL_POLICY_SEED=%q: %v", s, err)
			}
			seed = v
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if n == 0 {
		if s := os.Getenv("VCOIL_POLICY_CLUSTERS"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("VCOIL_POLICY_CLUSTERS=%q: %v", s, err)
			}
			n = v
		}
	}
	if n == 0 {
		n = defaultClusters
	}
	return seed, n
}

// TestRandomClustersAgreeWithKubernetesSemantics is the property test of the
// stack: for random clusters, the tables the renderer caches (both directions)
// build through the cache, the processor and the configurator admit exactly
// the connections that the Kubernetes semantics allow and this node is
// responsible for; and after random changes, applied incrementally, they
// still do and equal what a resync from scratch builds.
//
// Cluster number i uses seed+i. To replay a failure, run with
// -policy.seed=<the printed seed> -policy.clusters=1 (or the VCOIL_POLICY_SEED
// and VCOIL_POLICY_CLUSTERS variables).
func TestRandomClustersAgreeWithKubernetesSemantics(t *testing.T) {
	checkRandomClusters(t, 2000, false)
}

// TestRandomClustersWithTiersAgreeWithKubernetesSemantics is the cache
// stage for clusters with ClusterNetworkPolicies (Admin and Baseline tiers,
// Accept, Deny and Pass, rules that fail closed): the ordered renderer
// cache's tables (tables.Ordered, which the VPP ACL renderer uses for tiers)
// must give every connection the verdict of the oracle, which reads the
// tiers from the API objects, and incremental changes must equal a resync.
// Replay as for TestRandomClustersAgreeWithKubernetesSemantics.
func TestRandomClustersWithTiersAgreeWithKubernetesSemantics(t *testing.T) {
	checkRandomClusters(t, 1000, true)
}

// checkRandomClusters checks the clusters of the run's seeds (defaultN of
// them unless the settings say), one in ten large, with
// ClusterNetworkPolicies when tiers is set.
func checkRandomClusters(t *testing.T, defaultN int, tiers bool) {
	first, n := propertySettings(t, defaultN)
	t.Logf("checking %d random clusters (ClusterNetworkPolicies: %v) from seed %d", n, tiers, first)
	start := time.Now()
	for i := range n {
		seed := first + uint64(i)
		if msg := checkRandomCluster(t, seed, seed%10 == 9, tiers); msg != "" {
			t.Fatalf("cluster with seed %d (replay: go test ./v2/pkg/policy -run %s -policy.seed=%d -policy.clusters=1):\n%s",
				seed, t.Name(), seed, msg)
		}
	}
	t.Logf("%d clusters in %v", n, time.Since(start))
}

// checkRandomCluster checks the cluster of one seed (a large one when
// large is set), with ClusterNetworkPolicies when tiers is set.
func checkRandomCluster(t *testing.T, seed uint64, large, tiers bool) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := policyoracle.NewGenerator(rng)
	g.Large = large
	g.ClusterPolicies = tiers
	c := g.Cluster()
	p, err := newPipeline(c)
	if err != nil {
		return "building the pipeline: " + err.Error() + "\n" + c.String()
	}
	if msg := p.disagreement(c, rng.IntN); msg != "" {
		return "after the initial resync: " + msg + "\ncluster:\n" + c.String()
	}
	for _, r := range p.renderers() {
		checkTables(t, r)
	}

	// Change the cluster step by step; after each step the incremental state
	// must equal a resync from scratch, and at the end it must still agree
	// with the Kubernetes semantics.
	before := c.String()
	var changes string
	for range 1 + rng.IntN(8) {
		ch := g.Mutate(c)
		changes += ch.Description + "\n"
		if err := ch.Apply(context.Background(), p.cache); err != nil {
			return "applying " + ch.Description + ": " + err.Error()
		}
		fresh, err := newPipeline(c)
		if err != nil {
			return "building the pipeline again: " + err.Error()
		}
		if (p.ingress == nil) != (fresh.ingress == nil) {
			// The cluster gained or lost its first ClusterNetworkPolicy:
			// only the ordered tables are compared.
			p.ingress, p.egress, fresh.ingress, fresh.egress = nil, nil, nil, nil
		}
		ps, fs := p.renderers(), fresh.renderers()
		for i := range ps {
			pair := [2]*cacheRenderer{ps[i], fs[i]}
			if msg := sameState(pair[0].cache, pair[1].cache); msg != "" {
				return "after the changes:\n" + changes + "incremental state differs from a resync (tables on " +
					pair[0].cache.Direction().String() + "): " + msg + "\ncluster before:\n" + before + "cluster after:\n" + c.String()
			}
		}
	}
	if msg := p.disagreement(c, rng.IntN); msg != "" {
		return "after the changes:\n" + changes + msg + "\ncluster before:\n" + before + "cluster after:\n" + c.String()
	}
	for _, r := range p.renderers() {
		checkTables(t, r)
	}
	return ""
}
