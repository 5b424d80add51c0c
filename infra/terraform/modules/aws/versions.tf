terraform {
  # 1.9: validation blocks that refer to other variables (debounce windows, batching).
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.33 added EKS access entries; tested with 5.100. 6.x is not tested yet.
      version = ">= 5.33, < 6.0"
    }
  }
}
