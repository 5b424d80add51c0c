"""Powertools around the AWS handlers: JSON logs with the Lambda context, one EMF document per invocation.

Imported on first use, so ``import topocast.aws.handlers`` loads no SDK (cold start).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from topocast.aws.root import AwsRuntime

__all__ = ["lambda_entry", "tools"]

Handler = Callable[[dict[str, Any], AwsRuntime], Any]
_TOOLS: Any = None


def tools() -> Any:
    """Powertools' Logger and Metrics (imported on first use so `import topocast.aws.handlers` stays cheap)."""
    global _TOOLS
    if _TOOLS is None:
        from aws_lambda_powertools import Logger, Metrics

        service = os.environ.get("POWERTOOLS_SERVICE_NAME", "topocast")
        namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "topocast")
        _TOOLS = SimpleNamespace(logger=Logger(service=service), metrics=Metrics(namespace=namespace, service=service))
    return _TOOLS


def lambda_entry(runtime: Callable[[], AwsRuntime]) -> Callable[[Handler], Any]:
    """Wrap ``fn(event, runtime)`` as a Lambda handler with Powertools' Logger context and EMF metrics."""
    return lambda fn: _wrap(fn, runtime)


def _wrap(fn: Handler, runtime: Callable[[], AwsRuntime]) -> Any:
    def wrapper(event: dict[str, Any], context: Any) -> Any:
        from aws_lambda_powertools.metrics import MetricUnit

        logger, metrics = tools().logger, tools().metrics
        rt = runtime()
        metrics.clear_metrics()  # one invocation, one EMF document: nothing carried over from earlier work
        rt.metrics.sink = lambda name, value: metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

        @metrics.log_metrics
        @logger.inject_lambda_context(clear_state=True)
        def inner(event: dict[str, Any], context: Any) -> Any:
            logger.append_keys(cluster=rt.settings.cluster)
            return fn(event, rt)

        try:
            return inner(event, context)
        finally:
            rt.metrics.sink = None

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper
