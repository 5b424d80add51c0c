# Developer shortcuts. The Lambda runtime and architecture must match the Terraform variables
# lambda_runtime (python3.12) and lambda_architecture (x86_64) of infra/terraform/modules/aws.
TOPOCAST ?= .venv/bin/topocast
PY_VERSION ?= 3.12
ARCH ?= x86_64

.PHONY: package package-aws package-gcp

# dist/aws/{discover,render,publish}.zip (Lambda) and dist/gcp/{...}.zip (Cloud Functions sources)
package:
	$(TOPOCAST) package --out dist --cloud all --python-version $(PY_VERSION) --platform $(ARCH)

package-aws:
	$(TOPOCAST) package --out dist --cloud aws --python-version $(PY_VERSION) --platform $(ARCH)

package-gcp:
	$(TOPOCAST) package --out dist --cloud gcp
