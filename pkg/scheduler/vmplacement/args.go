package vmplacement

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// VMPlacementArgs are the plugin's arguments: the args of its entry in a
// KubeSchedulerConfiguration profile's pluginConfig. Every field is
// optional; ValidateAndDefault fills the defaults.
//
//	pluginConfig:
//	- name: VMPlacement
//	  args:
//	    runtimeClassNames: [vmpod]
//	    strategy: spread
//	    imageLocalityWeight: 1
//	    strategyWeight: 1
type VMPlacementArgs struct {
	// RuntimeClassNames are the RuntimeClasses whose pods are VM pods.
	// Pods of any other RuntimeClass (or none) are left to the other
	// plugins. Default: the RuntimeClasses vmpod ships, ["vmpod",
	// "vmpod-small"] (vmspec.Envelopes).
	RuntimeClassNames []string `json:"runtimeClassNames,omitempty"`
	// Strategy is how Score ranks nodes by memory: "spread" prefers the
	// node with the most memory free after placing the VM, "pack" the
	// node with the least. Default "spread".
	Strategy Strategy `json:"strategy,omitempty"`
	// ImageLocalityWeight weighs the image-locality part of the score,
	// 0 to 100; 0 turns it off. Default 1.
	ImageLocalityWeight *int64 `json:"imageLocalityWeight,omitempty"`
	// StrategyWeight weighs the pack-or-spread part of the score, 0 to
	// 100; 0 turns it off. Default 1.
	StrategyWeight *int64 `json:"strategyWeight,omitempty"`
}

// Strategy is the memory placement policy of Score.
type Strategy string

const (
	StrategySpread Strategy = "spread"
	StrategyPack   Strategy = "pack"
)

// Defaults of VMPlacementArgs.
const (
	DefaultStrategy            = StrategySpread
	DefaultImageLocalityWeight = 1
	DefaultStrategyWeight      = 1
	// MaxWeight bounds both weights, so that the raw score stays small.
	MaxWeight = 100
)

// ValidateAndDefault fills the defaults of every unset field of args, then
// reports every problem at once, each naming its field (as written in the
// pluginConfig) and, for a fixed set, the accepted values.
func ValidateAndDefault(args *VMPlacementArgs) error {
	if len(args.RuntimeClassNames) == 0 {
		args.RuntimeClassNames = vmspec.RuntimeClassNames()
	}
	if args.Strategy == "" {
		args.Strategy = DefaultStrategy
	}
	if args.ImageLocalityWeight == nil {
		args.ImageLocalityWeight = ptr(int64(DefaultImageLocalityWeight))
	}
	if args.StrategyWeight == nil {
		args.StrategyWeight = ptr(int64(DefaultStrategyWeight))
	}

	var errs []error
	for i, rc := range args.RuntimeClassNames {
		field := fmt.Sprintf("runtimeClassNames[%d]", i)
		if msgs := validation.IsDNS1123Subdomain(rc); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a RuntimeClass name: %s", field, rc, strings.Join(msgs, "; ")))
		} else if slices.Index(args.RuntimeClassNames, rc) < i {
			errs = append(errs, fmt.Errorf("%s: %q is listed twice", field, rc))
		}
	}
	if args.Strategy != StrategySpread && args.Strategy != StrategyPack {
		errs = append(errs, fmt.Errorf("strategy: %q is not one of %s, %s", args.Strategy, StrategySpread, StrategyPack))
	}
	for _, w := range []struct {
		field string
		v     int64
	}{{"imageLocalityWeight", *args.ImageLocalityWeight}, {"strategyWeight", *args.StrategyWeight}} {
		if w.v < 0 || w.v > MaxWeight {
			errs = append(errs, fmt.Errorf("%s: %d is not in 0..%d", w.field, w.v, MaxWeight))
		}
	}
	if *args.ImageLocalityWeight == 0 && *args.StrategyWeight == 0 {
		errs = append(errs, errors.New("imageLocalityWeight, strategyWeight: both are 0; disable the plugin's score extension point instead"))
	}
	return errors.Join(errs...)
}

// decodeArgs reads the plugin's args as the scheduler hands them over: a
// *runtime.Unknown holding the pluginConfig entry's args as JSON (or YAML),
// or nil when the profile has no pluginConfig entry for the plugin.
//
// Decoding is strict, unlike frameworkruntime.DecodeInto: an unknown or
// misspelt field ("stratgy") is an error, not silently the default.
func decodeArgs(obj runtime.Object) (VMPlacementArgs, error) {
	var args VMPlacementArgs
	if obj == nil {
		return args, nil
	}
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return args, fmt.Errorf("want args of type *runtime.Unknown, got %T", obj)
	}
	raw := u.Raw
	switch u.ContentType {
	case runtime.ContentTypeJSON, "":
	case runtime.ContentTypeYAML:
		j, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return args, err
		}
		raw = j
	default:
		return args, fmt.Errorf("args: unsupported content type %q", u.ContentType)
	}
	if len(raw) == 0 {
		return args, nil
	}
	strict, err := sigsjson.UnmarshalStrict(raw, &args)
	if err != nil {
		return args, err
	}
	return args, errors.Join(strict...)
}

func ptr[T any](v T) *T { return &v }
