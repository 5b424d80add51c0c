"""Cloud Functions (gen2) entry point of the discover function; the logic is in topocast.gcp.handlers."""

import functions_framework
from cloudevents.http import CloudEvent

from topocast.gcp.handlers import handle, setup_logging

setup_logging()


@functions_framework.cloud_event
def discover(cloud_event: CloudEvent) -> None:
    handle("discover", cloud_event)
