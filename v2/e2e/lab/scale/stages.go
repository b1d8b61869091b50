package scale

import _ "embed"

// KwokStages is the stage configuration kwok gets (kwok-stages.yaml).
//
//go:embed kwok-stages.yaml
var KwokStages []byte
