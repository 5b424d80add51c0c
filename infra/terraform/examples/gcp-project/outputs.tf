output "bucket_name" {
  description = "Bucket with graphs, rendered and published files."
  value       = module.topocast.bucket_name
}

output "function_urls" {
  description = "Function URLs by stage."
  value       = module.topocast.function_urls
}

output "slurm_prefix" {
  description = "Where the Slurm files are published."
  value       = module.topocast.slurm_prefix
}
