// crowdsec-bouncer-once: the CrowdSec bouncer plugin of Traefik (at the release k8s/versions.env
// names for the tests: CROWDSEC_BOUNCER_PLUGIN_TEST_VERSION), built by
// its own code from a Middleware's plugin configuration as Traefik builds it, then asked to serve
// one request, for the tests of the onprem profile. Only the decoding is ours: Traefik's
// (traefik/traefik v3.7.9, pkg/plugins/middlewareyaegi.go, lines 83-105: the plugin's
// CreateConfig, then mapstructure with the same decoder settings), made stricter by refusing a
// key no field takes, which Traefik silently ignores.
//
//	crowdsec-bouncer-once version
//	crowdsec-bouncer-once CONFIG.json KEY_FILE LAPI_HOST
//
// CONFIG.json is the Middleware's `spec.plugin.<name>` object; KEY_FILE stands for the file the
// Secret's mount gives (crowdsecLapiKeyFile), LAPI_HOST for the LAPI (crowdsecLapiHost): a
// loopback address where nothing listens plays a LAPI outage. It prints the HTTP status of one
// request from 198.51.100.7 (exit 0), or why the plugin refused its configuration (exit 2).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"

	bouncer "github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin"
	"github.com/mitchellh/mapstructure"
)

const module = "github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(moduleVersion())
		return
	}
	if len(os.Args) != 4 {
		fail(64, "usage: crowdsec-bouncer-once CONFIG.json KEY_FILE LAPI_HOST")
	}
	text, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(64, "%v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(text, &raw); err != nil {
		fail(64, "%s: %v", os.Args[1], err)
	}
	raw["crowdsecLapiKeyFile"] = os.Args[2]
	raw["crowdsecLapiHost"] = os.Args[3]
	// The plugin logs on stdout by default; stdout is this program's answer.
	if _, set := raw["logFilePath"]; !set {
		raw["logFilePath"] = "/dev/stderr"
	}
	config := bouncer.CreateConfig()
	if err := decode(raw, config, true); err != nil {
		fail(2, "a key no field of the plugin takes (Traefik would ignore it): %v", err)
	}
	config = bouncer.CreateConfig()
	if err := decode(raw, config, false); err != nil {
		fail(2, "Traefik cannot decode the configuration: %v", err)
	}
	next := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	handler, err := bouncer.New(context.Background(), next, config, "crowdsec")
	if err != nil {
		fail(2, "the plugin refuses its configuration: %v", err)
	}
	request := httptest.NewRequest(http.MethodGet, "http://whoami.example/", nil)
	request.RemoteAddr = "198.51.100.7:40000"
	response := httptest.NewRecorder()
	handler.ServeHTTP(response, request)
	fmt.Println(response.Code)
}

// decode is Traefik's createConfig; strict also refuses keys no field takes.
func decode(raw map[string]any, config any, strict bool) error {
	decoder, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToSliceHookFunc(","),
		WeaklyTypedInput: true,
		ErrorUnused:      strict,
		Result:           config,
	})
	if err != nil {
		return err
	}
	return decoder.Decode(raw)
}

func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crowdsec-bouncer-once: "+format+"\n", args...)
	os.Exit(code)
}
