terraform {
  required_version = ">= 1.9"

  required_providers {
    google = {
      source = "hashicorp/google"
      # cloudfunctions2 service_config and Cloud Run v2 IAM are stable from 5.x; 7.x is not tested yet.
      version = ">= 5.30, < 7.0"
    }
  }
}
