#!/bin/sh
echo "remote_coverage_tools is an offline shim: 'bazel coverage' is not supported in this workspace" >&2
exit 1
