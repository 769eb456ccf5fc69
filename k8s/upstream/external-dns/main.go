// external-dns-filter: the domain filter of external-dns at the pinned release, built by its own
// code from the arguments its Helm chart gives the container, for the tests of the onprem
// profile. It asks the real flag parser (pkg/apis/externaldns), the real filter
// (endpoint/domain_filter.go) and the real OVH provider's constructor; only the two one-line
// uses of the filter are ours, each citing the line it reproduces.
//
//	external-dns-filter version
//	external-dns-filter ARG... < QUESTIONS
//
// Each line of QUESTIONS is `zone NAME` (is the OVH zone NAME kept?) or `name NAME` (may a plan
// write the record NAME?); each answer, on stdout, is `zone NAME kept|dropped` or
// `name NAME written|refused`. Exit 2 when external-dns refuses the arguments. Nothing is asked
// of OVH: the provider is built, never called.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/external-dns/endpoint"
	"sigs.k8s.io/external-dns/pkg/apis/externaldns"
	"sigs.k8s.io/external-dns/provider/ovh"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(externaldns.Version)
		return
	}
	cfg := externaldns.NewConfig()
	if err := cfg.ParseFlags(os.Args[1:]); err != nil {
		fail(2, "external-dns refuses its arguments: %v", err)
	}
	// controller/execute.go, lines 98-103 at v0.21.0: the filter every part is given.
	filter := endpoint.NewDomainFilterWithOptions(
		endpoint.WithDomainFilter(cfg.DomainFilter),
		endpoint.WithDomainExclude(cfg.DomainExclude),
		endpoint.WithRegexDomainFilter(cfg.RegexDomainFilter),
		endpoint.WithRegexDomainExclude(cfg.RegexDomainExclude),
	)
	if cfg.Provider != "ovh" {
		fail(2, "the provider is %q, not ovh", cfg.Provider)
	}
	// The OVH client reads its credentials from the environment; none is used here.
	for _, key := range []string{"OVH_APPLICATION_KEY", "OVH_APPLICATION_SECRET", "OVH_CONSUMER_KEY"} {
		if os.Getenv(key) == "" {
			_ = os.Setenv(key, "unused")
		}
	}
	prvdr, err := ovh.New(context.Background(), cfg, filter)
	if err != nil {
		fail(2, "the OVH provider refuses its configuration: %v", err)
	}
	// controller/controller.go, line 111: a plan's names pass the filter and the registry's.
	names := endpoint.MatchAllDomainFilters{filter, prvdr.GetDomainFilter()}
	answer(filter, names)
}

func answer(zones *endpoint.DomainFilter, names endpoint.MatchAllDomainFilters) {
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		what, name, _ := strings.Cut(strings.TrimSpace(lines.Text()), " ")
		switch what {
		case "":
		case "zone":
			// provider/ovh/ovh.go, line 400: the zones the provider keeps.
			fmt.Println("zone", name, pick(zones == nil || zones.Match(name), "kept", "dropped"))
		case "name":
			// plan/plan.go, line 368: the records a plan considers.
			fmt.Println("name", name, pick(names.Match(name), "written", "refused"))
		default:
			fail(64, "unknown question %q", lines.Text())
		}
	}
	if err := lines.Err(); err != nil {
		fail(1, "reading the questions: %v", err)
	}
}

func pick(yes bool, ifYes, ifNo string) string {
	if yes {
		return ifYes
	}
	return ifNo
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "external-dns-filter: "+format+"\n", args...)
	os.Exit(code)
}
