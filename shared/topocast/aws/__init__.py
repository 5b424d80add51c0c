"""AWS adapters: thin shells that give the cloud-neutral core S3, DynamoDB, SQS and SSM.

boto3 is imported lazily inside functions so importing topocast stays cheap.
"""
