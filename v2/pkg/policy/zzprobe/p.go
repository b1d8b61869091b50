package zzprobe

import (
	_ "k8s.io/api/networking/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/labels"
	_ "sigs.k8s.io/controller-runtime/pkg/handler"
	_ "sigs.k8s.io/controller-runtime/pkg/event"
	_ "sigs.k8s.io/controller-runtime/pkg/cache"
	_ "k8s.io/client-go/tools/cache"
)
